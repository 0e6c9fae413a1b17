"""The norm a Spec names, applied to canonical weights `{name}.w` / `{name}.b`, and its op text."""

from __future__ import annotations

import numpy as np

from tracer.arch.spec import Spec
from tracer.engine.ops import layer_norm, rms_norm
from tracer.engine.ports import Weights


def norm(x: np.ndarray, W: Weights, name: str, spec: Spec) -> np.ndarray:
    if spec.norm == "rmsnorm":
        return rms_norm(x, W[name + ".w"], spec.norm_eps, spec.norm_offset)
    return layer_norm(x, W.get(name + ".w"), W.get(name + ".b"), spec.norm_eps)


def norm_op(spec: Spec) -> str:
    if spec.norm == "rmsnorm":
        return "x / rms(x) * (1 + w)" if spec.norm_offset else "x / rms(x) * w"
    return "(x - mean) / std * w + b"
