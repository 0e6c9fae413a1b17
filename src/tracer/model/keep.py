"""Which steps a run (and, below, a generation) keeps whole by default, so that a long input cannot exhaust memory.

Statistics are kept for every step regardless. Whole tensors are kept for
everything while the trace fits the budget; past it, the largest kinds of step
(attention score tensors grow with the square of the input) are reduced to
statistics, largest first, until it fits.
"""

from __future__ import annotations

import math

from tracer.arch.spec import Spec
from tracer.arch.steps_of import pass_templates
from tracer.errors import TracerError
from tracer.steps import matches, route_templates


DEFAULT_BUDGET = 2 * 1024**3  # bytes of kept tensors


def step_sizes(spec: Spec, batch: int, length: int, itemsize: int) -> dict[str, int]:
    """Bytes each step template the model records (arch.steps_of) takes in all (summed over blocks), for this
    model and input.

    Every sequence axis counts `length` (an encoder-decoder's decoder input is usually shorter: an upper bound)."""
    axis = {"batch": batch, "pos": length, "q_len": length, "kv_len": length, "enc_pos": length, "dec_pos": length,
            "d_model": spec.d_model, "heads": spec.n_heads, "kv_heads": spec.n_kv_heads, "d_head": spec.d_head,
            "d_ff": spec.d_ff, "vocab": spec.vocab_size, "d_embed": spec.d_embed or spec.d_model,
            "experts": spec.moe.n_experts if spec.moe else 0, "top_k": spec.moe.top_k if spec.moe else 0}
    sizes, made = {}, pass_templates(spec)
    for template, doc in route_templates(spec.route):
        if template not in made:
            continue
        stack = spec.encoder if template.startswith("encoder.") and spec.encoder is not None else spec
        count = stack.n_layers if "{i}" in template else 1
        size = count * itemsize * math.prod(axis[a] for a in doc.axes)
        if template.endswith("attn.mask"):
            size //= itemsize * spec.n_heads  # bool, broadcast over heads
        sizes[template.replace("{i}", "*")] = size
    return sizes


def largest_dropped(sizes: dict[str, int], budget: int) -> list[str]:
    """The globs to reduce to statistics, largest first, until the rest fits the budget.

    Masked scores cost nothing while their scores and mask are kept (the trace recomputes them on read:
    trace.DERIVED), so they go to statistics together with their scores, never alone."""
    derived = {g: (g[: -len("masked_scores")] + "scores", g[: -len("masked_scores")] + "mask")
               for g in sizes if g.endswith("attn.masked_scores")}
    total = sum(size for g, size in sizes.items() if g not in derived)
    dropped: list[str] = []
    for glob, size in sorted(sizes.items(), key=lambda kv: -kv[1]):
        if total <= budget:
            break
        if glob in derived:
            continue
        dropped.append(glob)
        total -= size
        for masked, inputs in derived.items():  # its derived step can no longer be recomputed: drop it too
            if glob in inputs and masked not in dropped:
                dropped.append(masked)
    return dropped


def auto_keep(spec: Spec, batch: int, length: int, itemsize: int, budget: int = DEFAULT_BUDGET) -> tuple[tuple[str, ...], list[str]]:
    """(keep globs, the globs reduced to statistics). ("*",) and [] when everything fits."""
    sizes = step_sizes(spec, batch, length, itemsize)
    dropped = largest_dropped(sizes, budget)
    if not dropped:
        return ("*",), []
    return tuple(g for g in sizes if g not in dropped), dropped


def check_keep_matched(globs, names: list[str]) -> None:
    """A keep glob that matches no recorded step is a mistake (a typo keeps nothing): name it."""
    missed = [g for g in globs if not any(matches(n, (g,)) for n in names)]
    if missed:
        more = f" (and {len(missed) - 1} more)" if len(missed) > 1 else ""
        raise TracerError(f"`keep` pattern {missed[0]!r}{more} matches no step of this run",
                          hint="the step names: tracer steps, or trace.names of a run")


def blocked_note(globs: list[str]) -> str:
    """One line for people: which steps were computed in blocks (model.blocked_globs), and what that means."""
    attention = any("attn." in g for g in globs)
    head = any(g in ("logits", "logits.raw", "probs") for g in globs)
    parts = (["attention a block of query rows at a time"] if attention else []) + \
            (["logits and probs a block of positions at a time"] if head else [])
    return (f"computed {' and '.join(parts) or ', '.join(globs)} (no step of theirs was kept whole): "
            "those tensors never existed whole; their statistics are exact")


# Which steps a generation trace keeps whole: `tracer run`'s memory policy over the prefill and every step.


DECODE = "decode.*."


def cached_key_step(spec: Spec) -> str:
    """The key step a decoding step records as the whole cache: the last of k -> k_norm -> k_rot the model has
    (engine.attention; the ones before it hold the new position only)."""
    return "attn.k_rot" if spec.positions == "rotary" else "attn.k_norm" if spec.qk_norm != "none" else "attn.k"


def decode_step_sizes(spec: Spec, batch: int, kv_len: int, enc_len: int, itemsize: int,
                      made: set[str] | None = None) -> dict[str, int]:
    """Bytes each step template takes in one decoding step with `kv_len` cached positions (the new one included).

    made: the model's templates (arch.steps_of.pass_templates), when the caller has them already."""
    axis = {"batch": batch, "pos": 1, "q_len": 1, "kv_len": kv_len, "enc_pos": enc_len, "dec_pos": 1,
            "d_model": spec.d_model, "heads": spec.n_heads, "kv_heads": spec.n_kv_heads, "d_head": spec.d_head,
            "d_ff": spec.d_ff, "vocab": spec.vocab_size, "d_embed": spec.d_embed or spec.d_model,
            "experts": spec.moe.n_experts if spec.moe else 0, "top_k": spec.moe.top_k if spec.moe else 0}
    sizes, made = {}, made if made is not None else pass_templates(spec)
    for template, doc in route_templates(spec.route):
        if template.startswith(("encoder.", "input.token")) or template not in made:
            continue  # the encoder runs once, in the prefill; optional steps this model does not record
        stack = spec
        count = stack.n_layers if "{i}" in template else 1
        whole_cache = template.endswith((cached_key_step(spec), "attn.v")) and "cross" not in template
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
    made = pass_templates(spec)
    for t in range(1, n_new):
        for glob, size in decode_step_sizes(spec, batch, prompt_len + t, enc_len, itemsize, made).items():
            totals[glob] = totals.get(glob, 0) + size
    dropped = largest_dropped(totals, budget)
    if not dropped:
        return ("*",), []
    kept = tuple(g for g in totals if g not in dropped)
    return kept + tuple(DECODE + g for g in kept), dropped
