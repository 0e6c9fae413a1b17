"""Token ids -> the residual stream entering block 0: lookup, then positions, segments, scale and norm as the family has them."""

from __future__ import annotations

import numpy as np

from tracer.arch.spec import Spec
from tracer.engine.norms import norm
from tracer.engine.ops import linear
from tracer.engine.ports import StepSink, Weights

_BTD = ("batch", "pos", "d_model")


def embed(ids: np.ndarray, positions: np.ndarray | None, token_types: np.ndarray | None, W: Weights, spec: Spec,
          rec: StepSink, prefix: str = "") -> np.ndarray:
    """ids, positions, token types [batch, pos] -> [batch, pos, d_model]; `prefix` names the stack ("encoder.").

    Tables are read with W.rows, so a lazy mapping widens only the rows it looks up."""
    e = prefix + "embed."
    table = e + "W_E" if e + "W_E" in W else "embed.W_E"  # an encoder-decoder's decoder has its own (maybe tied)
    x = rec(e + "tokens", W.rows(table, ids), _BTD, "W_E[ids]")  # [batch, pos, d_model]
    terms = ["tokens"]
    if spec.d_embed is not None:  # OPT-350m: narrower embeddings, projected up to d_model
        x = rec(e + "project_in", linear(x, W["project_in.W"]), _BTD, "tokens @ W_project_in")
        terms = ["project_in"]
    if spec.embed_scale is not None:
        x = x * x.dtype.type(spec.embed_scale)  # scaled in the compute dtype, as transformers does
        terms = [f"tokens * {spec.embed_scale:.4g}"]
    if spec.token_types:
        types = rec(e + "token_types", W.rows(e + "W_type", token_types), _BTD, "W_type[token_types]")
        x = x + types
        terms.append("token_types")
    if spec.positions == "learned":
        offset = spec.position_offset
        pos = rec(e + "positions", W.rows(e + "W_pos", positions + offset), _BTD,
                  f"W_pos[positions + {offset}]" if offset else "W_pos[positions]")
        x = x + pos
        terms.append("positions")
    op = " + ".join(terms)
    if spec.embed_norm:
        x = norm(x, W, e + "ln", spec)
        op = f"LayerNorm({op})"
    elif spec.positions == "rotary":
        op += " (positions enter through rotary)"
    elif spec.positions == "relative":
        op += " (positions enter as a bias on the scores)"
    return rec(e + "out", x, _BTD, op)
