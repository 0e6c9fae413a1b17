"""Which steps a run (and, below, a generation) keeps whole by default, so that a long input cannot exhaust memory.

Statistics are kept for every step regardless. Whole tensors are kept for
everything while the trace fits the budget; past it, the largest kinds of step
(attention score tensors grow with the square of the input) are reduced to
statistics, largest first, until it fits.
"""

from __future__ import annotations

import math

from tracer.arch.spec import Spec
from tracer.errors import TracerError
from tracer.steps import matches, route_templates


DEFAULT_BUDGET = 2 * 1024**3  # bytes of kept tensors


def step_sizes(spec: Spec, batch: int, length: int, itemsize: int) -> dict[str, int]:
    """Bytes each step template of the model's route takes in all (summed over blocks), for this model and input.

    Every sequence axis counts `length` (an encoder-decoder's decoder input is usually shorter: an upper bound)."""
    axis = {"batch": batch, "pos": length, "q_len": length, "kv_len": length, "enc_pos": length, "dec_pos": length,
            "d_model": spec.d_model, "heads": spec.n_heads, "kv_heads": spec.n_kv_heads, "d_head": spec.d_head,
            "d_ff": spec.d_ff, "vocab": spec.vocab_size, "d_embed": spec.d_embed or spec.d_model,
            "experts": spec.moe.n_experts if spec.moe else 0, "top_k": spec.moe.top_k if spec.moe else 0}
    sizes = {}
    for template, doc in route_templates(spec.route):
        if not produced(template, spec):
            continue
        stack = spec.encoder if template.startswith("encoder.") and spec.encoder is not None else spec
        count = stack.n_layers if "{i}" in template else 1
        size = count * itemsize * math.prod(axis[a] for a in doc.axes)
        if template.endswith("attn.mask"):
            size //= itemsize * spec.n_heads  # bool, broadcast over heads
        sizes[template.replace("{i}", "*")] = size
    return sizes


def produced(template: str, spec: Spec) -> bool:
    """False for the steps of the route's catalogue that this model does not record (rotary steps without
    rotary positions, dense-MLP steps in an all-MoE model, soft-capping, q/k norms, the other heads, ...).
    Decided on the stack the template belongs to (an encoder-decoder's `encoder.` steps on its encoder)."""
    stack = spec.encoder if spec.encoder is not None and template.startswith(("encoder.", "input.")) \
        and not template.startswith("input.decoder_") else spec
    moe = stack.moe
    dense_mlp = moe is None or (bool(moe.layers) and not all(moe.layers))
    rule = {
        "attn.scores.raw": stack.attn_softcap is not None,
        "attn.q_norm": stack.qk_norm != "none",
        "attn.k_norm": stack.qk_norm != "none",
        "attn.q_rot": stack.positions == "rotary",
        "attn.k_rot": stack.positions == "rotary",
        "attn.position_bias": stack.relative_bias is not None,
        "embed.positions": stack.positions == "learned",
        "input.positions": stack.positions != "relative",
        "input.decoder_positions": stack.positions != "relative",
        "ln1.out": stack.norm_placement != "after",
        "ln2.out": stack.norm_placement in ("pre", "sandwich") and not stack.shared_norm,
        "resid_mid": stack.residual != "parallel",
        "ln1_post.out": stack.norm_placement in ("sandwich", "after"),
        "ln2_post.out": stack.norm_placement in ("sandwich", "after"),
        "mlp.pre": dense_mlp,
        "mlp.post": dense_mlp,
        "mlp.up": dense_mlp and stack.mlp == "gated",
        "mlp.router.logits": moe is not None,
        "mlp.router.experts": moe is not None,
        "mlp.router.weights": moe is not None,
        "mlp.expert_out": moe is not None,
        "mlp.shared.out": moe is not None and bool(moe.d_shared),
        "mlp.shared.gate": moe is not None and bool(moe.d_shared),
        "final_norm.out": stack.final_norm,
        "embed.project_in": spec.d_embed is not None,
        "project_out": spec.d_embed is not None,
        "head.dense": spec.head == "mlm",
        "head.act": spec.head == "mlm",
        "head.ln.out": spec.head == "mlm",
        "logits.raw": spec.logit_softcap is not None,
        "logits": spec.head != "none",
        "probs": spec.head != "none",
        "pooled": spec.head == "none",
    }
    last = template.split("{i}.")[-1]  # the step within its block (or the whole name outside blocks)
    for prefix in ("encoder.", "decoder."):
        last = last[len(prefix):] if last.startswith(prefix) else last
    return rule.get(last, True)


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
