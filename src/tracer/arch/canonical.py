"""Canonical weight names and the shapes a Spec implies for them.

Every adapter maps its family's HF tensors onto these names, in the [in, out]
orientation the engine multiplies by (`x @ W`). The loader checks each against
`expected_shapes`, so a config that disagrees with its weights is caught at load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from tracer.arch.spec import Spec

Getter = Callable[[str], np.ndarray]


@dataclass(frozen=True)
class Source:
    """Where a canonical weight comes from: an HF tensor name and how to reshape it."""

    hf_name: str
    transform: Callable[[np.ndarray], np.ndarray] = lambda a: a
    aliases: tuple[str, ...] = ()  # older names of the same tensor (e.g. Pythia's embed_out)


def transposed(hf_name: str, aliases: tuple[str, ...] = ()) -> Source:
    """An nn.Linear weight stored [out, in], used as [in, out] (a view, no copy)."""
    return Source(hf_name, lambda a: a.T, aliases)


def rows_transposed(hf_name: str, start: int, stop: int) -> Source:
    """Rows start:stop of a fused [out, in] weight, as [in, out]."""
    return Source(hf_name, lambda a: a[start:stop].T)


def expected_shapes(spec: Spec) -> dict[str, tuple[int, ...]]:
    d, v, f = spec.d_model, spec.vocab_size, spec.d_ff
    q_out, kv_out = spec.n_heads * spec.d_head, spec.n_kv_heads * spec.d_head
    has_norm_bias = spec.norm == "layernorm"
    shapes: dict[str, tuple[int, ...]] = {"embed.W_E": (v, d)}
    if spec.positions == "learned":
        shapes["embed.W_pos"] = (spec.max_positions + spec.position_offset, d)
    for i in range(spec.n_layers):
        p = f"blocks.{i}."
        for norm in ("ln1", "ln2"):
            shapes[p + norm + ".w"] = (d,)
            if has_norm_bias:
                shapes[p + norm + ".b"] = (d,)
        shapes.update({p + "attn.W_q": (d, q_out), p + "attn.W_k": (d, kv_out), p + "attn.W_v": (d, kv_out)})
        shapes[p + "attn.W_o"] = (q_out, d)
        if spec.qkv_bias:
            shapes.update({p + "attn.b_q": (q_out,), p + "attn.b_k": (kv_out,), p + "attn.b_v": (kv_out,)})
        if spec.o_bias:
            shapes[p + "attn.b_o"] = (d,)
        shapes[p + "mlp.W_in"] = (d, f)
        if spec.mlp == "gated":
            shapes[p + "mlp.W_up"] = (d, f)
        shapes[p + "mlp.W_out"] = (f, d)
        if spec.mlp_bias:
            shapes[p + "mlp.b_in"] = (f,)
            shapes[p + "mlp.b_out"] = (d,)
    if spec.final_norm:
        shapes["final_norm.w"] = (d,)
        if has_norm_bias:
            shapes["final_norm.b"] = (d,)
    shapes["unembed.W_U"] = (d, v)
    if spec.head_bias:
        shapes["unembed.b_U"] = (v,)
    return shapes
