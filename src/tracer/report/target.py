"""--target: the token a person asks about, and the other ways the same word could have been meant.

"warm" after "Spring is" is usually the token " warm" (with its leading space);
the bare "warm" can rank in the hundreds while " warm" is the top guess. When a
variant of the target (leading space added or removed, first letter's case
flipped) ranks better, the screen says so and shows how to ask for it.
"""

from __future__ import annotations

from tracer.report.distribution import distribution_at
from tracer.checkpoint.pieces import shown_piece


def spelling_variants(text: str) -> list[str]:
    """The target with its leading space toggled and its first letter's case flipped, in that order."""
    bare = text.lstrip(" ")
    forms = [bare, " " + bare]
    if bare[:1].isalpha():
        flipped = bare[0].swapcase() + bare[1:]
        forms += [flipped, " " + flipped]
    out = []
    for form in forms:
        if form != text and form not in out and form.strip():
            out.append(form)
    return out


def target_variants(text: str | None, tokenizer) -> tuple[dict, ...]:
    """Each variant's first token id (what the rank is about) and how many tokens it is."""
    if text is None or tokenizer is None or text.startswith("id:"):
        return ()
    out = []
    for form in spelling_variants(text):
        toks = tokenizer.encode(form, special_tokens=False)
        if toks:
            first = toks[0]
            out.append({"text": form, "id": first.id, "n_tokens": len(toks),
                        "token": shown_piece(first.piece, first.bytes.hex(" "), first.special)})
    return tuple(out)


def better_variants(trace, row: int, position: int, target: dict, variants: tuple[dict, ...]) -> list[dict]:
    """Variants whose token ranks better than the target's at this position, best first."""
    probs, _, _ = distribution_at(trace, row, position)
    if probs is None:
        return []
    seen, better = {target["id"]}, []
    for v in variants:
        if v["id"] in seen or not 0 <= v["id"] < probs.shape[-1]:
            continue
        seen.add(v["id"])
        rank = int((probs > probs[v["id"]]).sum()) + 1
        if rank < target["rank"]:
            better.append(dict(v, rank=rank, prob=float(probs[v["id"]]), how=_difference(target.get("text") or "", v["text"])))
    return sorted(better, key=lambda v: v["rank"])


def _difference(original: str, variant: str) -> str:
    parts = []
    if variant.startswith(" ") != original.startswith(" "):
        parts.append("with a leading space" if variant.startswith(" ") else "without the leading space")
    if variant.strip()[:1] != original.strip()[:1]:
        parts.append("with the first letter's case flipped")
    return "the target " + " and ".join(parts) if parts else ""


def variant_hint(v: dict) -> str:
    """One line for the screen: what ranks better and how to ask for it."""
    how = v.get("how", "")
    split = f", the first of {v['n_tokens']} tokens" if v["n_tokens"] > 1 else ""
    quoted = "'" + v["text"].replace("'", "'\\''") + "'"
    p = f"{v['prob']:.3f}" if v["prob"] >= 1e-3 else f"{v['prob']:.1e}"
    return (f"{v['token']} (id {v['id']}{split}) ranks {v['rank']}, prob {p}"
            + (f": {how}" if how else "") + f"; ask with --target {quoted}")


def track_target(lens: dict, trace, model, row: int, position: int, target: dict) -> None:
    """Add the target's probability and rank after every layer to the logit lens rows."""
    from tracer.report.lens import logit_lens, rank_of

    tid = target["id"]
    lens["target"] = {k: target[k] for k in ("id", "token", "special")}
    layers = logit_lens(trace, model.weights, model.spec, row, position)
    for r, layer in zip(lens["layers"], layers):
        r["target_prob"] = float(layer.probs[tid])
        r["target_rank"] = rank_of(layer.probs, tid)
