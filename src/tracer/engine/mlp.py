"""The MLP sublayer: plain (up, activation, down) or gated (act(gate) * up, down)."""

from __future__ import annotations

import numpy as np

from tracer.arch.spec import Spec
from tracer.engine.ops import ACTIVATIONS, affine_op, linear
from tracer.engine.ports import StepSink, Weights

_BTF = ("batch", "pos", "d_ff")


def mlp(x: np.ndarray, W: Weights, p: str, spec: Spec, rec: StepSink) -> np.ndarray:
    act = ACTIVATIONS[spec.activation]
    pre = rec(p + "mlp.pre", linear(x, W[p + "mlp.W_in"], W.get(p + "mlp.b_in")), _BTF,
              "x @ W_gate" if spec.mlp == "gated" else affine_op("x", "in", W, p + "mlp."))
    if spec.mlp == "gated":
        up = rec(p + "mlp.up", linear(x, W[p + "mlp.W_up"], W.get(p + "mlp.b_up")), _BTF, "x @ W_up")
        post = act(pre)  # a new array: multiplied in place
        post *= up
        post = rec(p + "mlp.post", post, _BTF, f"{spec.activation}(pre) * up")
    else:
        post = rec(p + "mlp.post", act(pre), _BTF, f"{spec.activation}(pre)")
    return linear(post, W[p + "mlp.W_out"], W.get(p + "mlp.b_out"))  # [batch, pos, d_model]
