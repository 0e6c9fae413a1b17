"""The porting pitfalls the mask lab's messages cite as P1..P13 (reference/mask-conventions.md §3).

A message says `(P3)`; the screen then prints the one-line meaning of every code it cited, and the man page
(tracer mask, "Porting pitfalls") defines them all.
"""

from __future__ import annotations

import re

PITFALLS = {
    "P1": "inverted bool polarity (torch MultiheadAttention True = block; SDPA, JAX, Keras, transformers True = keep)",
    "P2": "a 0/1 keep mask passed where an additive mask is expected: adding 0 or 1 blocks nothing",
    "P3": "the mask applied after the softmax without renormalising: rows no longer sum to 1",
    "P4": "fully masked rows become NaN with -inf and a naive softmax (left-padding queries, all-pad rows)",
    "P5": "a finite fill too small, or one that overflows the dtype (-1e9 in float16, finfo.min + finfo.min)",
    "P6": "causal alignment when Q != K: top-left (torch, JAX) vs bottom-right (FlashAttention >= 2.1, a KV cache)",
    "P7": "a mask broadcast over the wrong axis (repeat instead of repeat_interleave for (N*H, L, S))",
    "P8": "key_padding_mask vs attn_mask confusion: (N, S) vs (L, S), mixed dtypes, float key padding",
    "P9": "left padding with learned absolute positions: the positions shift by the pad count",
    "P10": "sliding-window off-by-one: W keys including the query vs W to the left plus the query",
    "P11": "is_causal together with an explicit mask: an error, a silent AND, or the mask dropped, by backend",
    "P12": "ALiBi form: BLOOM's slope*j vs -slope*|i-j|, equal only when causal (up to a per-row constant)",
    "P13": "T5: no 1/sqrt(d) scaling, the bias added before the mask, different buckets for encoder and decoder",
}

CODE = re.compile(r"\bP(1[0-3]|[1-9])\b")


def cited(texts) -> list[str]:
    """The pitfall codes the texts cite, in number order."""
    found = {f"P{m}" for t in texts for m in CODE.findall(t)}
    return sorted(found, key=lambda c: int(c[1:]))
