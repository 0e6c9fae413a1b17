"""Edited copies of fixtures, and counts read straight from their files, for the tests of several rooms."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import shutil
import struct
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from tracer.trace import Trace


def perturbed_copy(src, dst, tensor: str, scale: float = 0.05, seed: int = 0):
    """Copy a checkpoint folder and add noise to one tensor in whichever shard holds it."""
    shutil.copytree(src, dst)
    index = dst / "model.safetensors.index.json"
    shard = json.loads(index.read_text())["weight_map"][tensor] if index.is_file() else "model.safetensors"
    tensors = load_file(str(dst / shard))
    w = tensors[tensor]
    tensors[tensor] = (w + np.random.default_rng(seed).standard_normal(w.shape).astype(w.dtype) * scale * np.abs(w).mean()).astype(w.dtype)
    save_file(tensors, str(dst / shard), metadata={"format": "pt"})
    return dst


def rerouted_copy(trace, block: int, pos: int):
    """The trace with one token sent to an expert it did not choose at `block` (a simulated routing bug)."""
    name = f"blocks.{block}.mlp.router.experts"
    steps = []
    for s in trace.steps:
        if s.name == name:
            arr = s.array.copy()
            unused = next(e for e in range(4) if e not in arr[0, pos])
            arr[0, pos, 1] = unused
            s = dataclasses.replace(s, array=arr)
        steps.append(s)
    return Trace(steps, dict(trace.meta))


def safetensors_float_parameters(folder: Path, ignored: tuple[str, ...] = ()) -> int:
    """Count float tensor elements straight from the safetensors headers, less names the adapter ignores."""
    total = 0
    for f in folder.glob("*.safetensors"):
        if f.name.startswith("reference"):
            continue
        raw = f.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        total += sum(math.prod(e["shape"]) for k, e in header.items()
                     if k != "__metadata__" and e["dtype"] in ("F16", "BF16", "F32", "F64")
                     and not any(fnmatch.fnmatch(k, pattern) for pattern in ignored))
    return total
