"""Fixtures built afresh with transformers and one hooked forward of them, for the live capture and family tests."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_builder():
    spec = importlib.util.spec_from_file_location("build_fixtures", ROOT / "fixtures" / "build_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_fixtures(tmp_path_factory, names, write) -> dict:
    """{name: folder} of freshly built fixtures; `write(builder, folder)` adds the references or prompts."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    builder = load_builder()
    torch.set_num_threads(1)
    builder.quiet_transformers()
    out = tmp_path_factory.mktemp("fixtures")
    base = builder.train_tokenizer()
    folders = {}
    for name in names:
        folders[name] = builder.build_model(name, out, base)
        write(builder, folders[name])
    return folders


def prompt_ids(folder: Path) -> list[list[int]]:
    return [json.loads((folder / "prompts.json").read_text())["reference"]["ids"]]


def hf_model(folder: Path, dtype="float32"):
    from tracer.capture.hf import load_model

    return load_model(folder, dtype)


def hf_forward(folder: Path, ids, mask=None):
    """(model, step arrays from hooks, step arrays from transformers' outputs) of one float32 forward."""
    import torch
    from tracer.capture.hf import opt_positions, run_forward
    from tracer.engine.masks import positions_from_mask

    model, family = hf_model(folder)
    ids = np.asarray(ids, dtype=np.int64)
    mask = np.ones_like(ids) if mask is None else np.asarray(mask, dtype=np.int64)
    positions = opt_positions(mask) if family == "opt" else positions_from_mask(mask)
    with torch.inference_mode():
        hooks, outputs = run_forward(model, family, ids, mask, positions)
    return model, {k: v[0] for k, v in hooks.items()}, {k: v[0] for k, v in outputs.items()}
