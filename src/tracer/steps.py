"""The step names: tracer's public contract.

Every tensor the engine records is named by one of these templates (`{i}` is a
block index). Users diff against these names and porters write their own dumps
with them, so they only ever grow. The man page and `tracer steps` are generated
from this table, and a test checks that every recorded step matches one row with
the same axes.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class StepDoc:
    template: str  # e.g. "blocks.{i}.attn.q"
    axes: tuple[str, ...]  # named axes, outermost first
    what: str


_BTD = ("batch", "pos", "d_model")
_BHQK = ("batch", "heads", "q_len", "kv_len")

CATALOGUE: tuple[StepDoc, ...] = (
    StepDoc("input.ids", ("batch", "pos"), "token ids (int64)"),
    StepDoc("input.mask", ("batch", "pos"), "1 = real token, 0 = padding (int64)"),
    StepDoc("input.positions", ("batch", "pos"), "position ids used (int64; cumsum(mask) - 1, pads 0)"),
    StepDoc("embed.tokens", _BTD, "token embedding lookup W_E[ids]"),
    StepDoc("embed.positions", _BTD, "learned position embeddings W_pos[positions] (absent for rotary)"),
    StepDoc("embed.out", _BTD, "residual stream entering block 0 (after any scale)"),
    StepDoc("blocks.{i}.ln1.out", _BTD, "first norm of block i (after attention in a post-norm block)"),
    StepDoc("blocks.{i}.attn.q", ("batch", "heads", "pos", "d_head"), "query projection split into heads, bias added"),
    StepDoc("blocks.{i}.attn.k", ("batch", "kv_heads", "pos", "d_head"), "key projection split into kv heads, bias added"),
    StepDoc("blocks.{i}.attn.v", ("batch", "kv_heads", "pos", "d_head"), "value projection split into kv heads, bias added"),
    StepDoc("blocks.{i}.attn.q_rot", ("batch", "heads", "pos", "d_head"), "queries after rotary embedding"),
    StepDoc("blocks.{i}.attn.k_rot", ("batch", "kv_heads", "pos", "d_head"), "keys after rotary embedding"),
    StepDoc("blocks.{i}.attn.scores", _BHQK, "q.k^T * scale, plus any position bias, before the mask"),
    StepDoc("blocks.{i}.attn.mask", _BHQK, "boolean keep-mask as applied, True = attend (size-1 axes broadcast)"),
    StepDoc("blocks.{i}.attn.masked_scores", _BHQK, "scores with blocked cells set to -inf"),
    StepDoc("blocks.{i}.attn.weights", _BHQK, "softmax over keys; fully masked rows are all zero"),
    StepDoc("blocks.{i}.attn.z", ("batch", "heads", "q_len", "d_head"), "weights @ v (kv heads repeated for grouped-query)"),
    StepDoc("blocks.{i}.attn.out", _BTD, "heads merged and put through the output projection"),
    StepDoc("blocks.{i}.resid_mid", _BTD, "residual stream after the attention sublayer (absent with parallel residual)"),
    StepDoc("blocks.{i}.ln2.out", _BTD, "second norm of block i"),
    StepDoc("blocks.{i}.mlp.pre", ("batch", "pos", "d_ff"), "first MLP projection before the activation (gate branch when gated)"),
    StepDoc("blocks.{i}.mlp.up", ("batch", "pos", "d_ff"), "linear (up) branch of a gated MLP"),
    StepDoc("blocks.{i}.mlp.post", ("batch", "pos", "d_ff"), "after the activation (times up when gated)"),
    StepDoc("blocks.{i}.mlp.out", _BTD, "after the down projection"),
    StepDoc("blocks.{i}.resid_post", _BTD, "residual stream leaving block i"),
    StepDoc("final_norm.out", _BTD, "final norm"),
    StepDoc("logits", ("batch", "pos", "vocab"), "unembedding: final_norm.out @ W_U"),
    StepDoc("probs", ("batch", "pos", "vocab"), "softmax of logits over the vocabulary"),
)


def _template_regex(template: str) -> re.Pattern:
    return re.compile("^" + re.escape(template).replace(r"\{i\}", r"(\d+)") + "$")


_REGEXES = tuple((_template_regex(d.template), d) for d in CATALOGUE)


def describe(name: str) -> StepDoc | None:
    """The catalogue row a concrete step name belongs to, or None."""
    for regex, doc in _REGEXES:
        if regex.match(name):
            return doc
    return None


def block_of(name: str) -> int | None:
    """Block index of a step name (`blocks.3.attn.q` -> 3), None outside blocks."""
    m = re.match(r"^(?:\w+\.)?blocks\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def matches(name: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """True when a step name matches any glob pattern (`*` spans dots)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)
