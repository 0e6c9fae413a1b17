"""Which steps a generation trace keeps whole: `tracer run`'s memory policy over the prefill and every step.

A decoding step is small (one query row) except that `attn.k`/`attn.k_rot`/`attn.v`
hold the whole cache, so a long generation adds up. Every step template is
summed over the prefill and all decoding steps; past the budget the largest are
reduced to statistics, largest first, in the prefill and the steps alike.
"""

from __future__ import annotations

import math

from tracer.arch.spec import Spec
from tracer.keep_policy import DEFAULT_BUDGET, largest_dropped, produced, step_sizes
from tracer.steps import route_templates

DECODE = "decode.*."
_CACHE_STEPS = ("attn.k", "attn.k_rot", "attn.v")


def decode_step_sizes(spec: Spec, batch: int, kv_len: int, enc_len: int, itemsize: int) -> dict[str, int]:
    """Bytes each step template takes in one decoding step with `kv_len` cached positions (the new one included)."""
    axis = {"batch": batch, "pos": 1, "q_len": 1, "kv_len": kv_len, "enc_pos": enc_len, "dec_pos": 1,
            "d_model": spec.d_model, "heads": spec.n_heads, "kv_heads": spec.n_kv_heads, "d_head": spec.d_head,
            "d_ff": spec.d_ff, "vocab": spec.vocab_size, "d_embed": spec.d_embed or spec.d_model,
            "experts": spec.moe.n_experts if spec.moe else 0, "top_k": spec.moe.top_k if spec.moe else 0}
    sizes = {}
    for template, doc in route_templates(spec.route):
        if template.startswith(("encoder.", "input.token")) or not produced(template, spec):
            continue  # the encoder runs once, in the prefill; optional steps this model does not record
        stack = spec
        count = stack.n_layers if "{i}" in template else 1
        whole_cache = template.endswith(_CACHE_STEPS) and "cross" not in template
        if template.endswith("attn.k") and spec.positions == "rotary":
            whole_cache = False  # rotary: attn.k is the new position before rotation; attn.k_rot is the cache
        sizes_axis = dict(axis, pos=kv_len) if whole_cache else axis
        size = count * itemsize * math.prod(sizes_axis[a] for a in doc.axes)
        if template.endswith("attn.mask"):
            size //= itemsize * spec.n_heads
        sizes[template.replace("{i}", "*")] = size
    return sizes


def generation_keep(spec: Spec, batch: int, prompt_len: int, n_new: int, itemsize: int, enc_len: int,
                    keep: tuple[str, ...] | None = None, budget: int = DEFAULT_BUDGET) -> tuple[tuple[str, ...], list[str]]:
    """(keep globs over prefill and `decode.{t}.` names, globs reduced to statistics)."""
    if keep is not None:
        return tuple(keep) + tuple(DECODE + g for g in keep if not g.startswith("decode.")), []
    totals = dict(step_sizes(spec, batch, max(prompt_len, enc_len), itemsize))
    for t in range(1, n_new):
        for glob, size in decode_step_sizes(spec, batch, prompt_len + t, enc_len, itemsize).items():
            totals[glob] = totals.get(glob, 0) + size
    dropped = largest_dropped(totals, budget)
    if not dropped:
        return ("*",), []
    kept = tuple(g for g in totals if g not in dropped)
    return kept + tuple(DECODE + g for g in kept), dropped
