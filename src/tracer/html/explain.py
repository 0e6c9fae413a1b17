"""The steps in order, explained: one card per idea of the article (token -> vector -> Q/K/V -> scale ->
mask -> heads -> norm -> residual -> MLP -> logits -> softmax), each with this model's real shapes and the
step names it covers; a "guided" button shows them one at a time."""

from __future__ import annotations

from tracer.html.common import esc
from tracer.html.flow import named_shape


def _find(records: list[dict], *suffixes: str) -> dict | None:
    """The first recorded step (block 0 when the step is per block) whose name ends with one of `suffixes`."""
    for suffix in suffixes:
        for r in records:
            if r["name"] == suffix or (r["name"].endswith("." + suffix) and r.get("block") in (None, 0)):
                return r
    return None


def cards(report: dict) -> list[tuple[str, str, list[dict]]]:
    """(title, paragraph, steps it covers), in the article's order, for the steps this trace recorded."""
    recs = [r for r in report.get("steps") or [] if not r["name"].startswith("decode.")]
    m = report.get("model") or {}
    d, h, dh, kv = m.get("d_model"), m.get("n_heads"), m.get("d_head"), m.get("n_kv_heads")
    shape = lambda r: named_shape(r.get("axes"), r.get("shape")) if r else "–"  # noqa: E731
    step = lambda *s: [r for r in [_find(recs, *s)] if r]  # noqa: E731
    ids, emb, q, k = _find(recs, "input.ids"), _find(recs, "embed.out"), _find(recs, "attn.q"), _find(recs, "attn.k")
    sc, mask, w = _find(recs, "attn.scores"), _find(recs, "attn.mask"), _find(recs, "attn.weights")
    z, out, ln = _find(recs, "attn.z"), _find(recs, "attn.out"), _find(recs, "ln1.out")
    mid, mlp = _find(recs, "resid_mid", "resid_post"), _find(recs, "mlp.post", "mlp.pre")
    logits, probs = _find(recs, "logits"), _find(recs, "probs")
    placement = m.get("norm_placement", "pre")
    scale = m.get("score_scale") or {}  # the factor this family really uses (report.card.score_scale)
    cap = (f"; then soft-capped, tanh(s / {m['attn_softcap']:g}) × {m['attn_softcap']:g}, so no score leaves "
           f"±{m['attn_softcap']:g}" if m.get("attn_softcap") else "")
    out_cards = [
        ("token", f"The text is cut into tokens and each token is a number, its id in a vocabulary of {m.get('vocab')}: "
                  f"input.ids is {shape(ids)}.", step("input.ids")),
        ("token → vector", f"Each id picks one row of the embedding table: a vector of d_model = {d} numbers per token "
                           f"({m.get('positions') or 'positions'}); the residual stream entering block 0 is {shape(emb)}.",
         step("embed.tokens", "embed.out")),
        ("Q, K, V", f"Three linear maps turn each token's vector into a query (what it looks for), a key (what it "
                    f"offers) and a value (what it passes on): q is {shape(q)}, k is {shape(k)} "
                    f"({h} query heads, {kv} key/value heads of d_head = {dh}).", step("attn.q", "attn.k", "attn.v")),
        (scale.get("title", "scale by √d_head"), "Every query is compared with every key by a dot product, "
         f"{scale.get('text') or f'divided by √{dh}'}, so the scores do not grow with the head size and the softmax stays "
         f"soft{cap}: attn.scores is {shape(sc)}.", step("attn.scores", "attn.scores.raw")),
        ("mask before softmax", "Keys a query may not see get −∞ BEFORE the softmax (exp(−∞) = 0), so each row of "
                                f"weights still sums to 1 over the keys it may see: the keep-mask is {shape(mask)}; "
                                "dropping weights after the softmax would leave rows that sum to less than 1 "
                                "(the row panel above shows both).", step("attn.mask", "attn.masked_scores")),
        ("softmax, then heads", f"Each row of scores becomes weights ({shape(w)}); each head mixes the values with "
                                f"its weights ({shape(z)}) and the heads are joined and projected back to d_model: "
                                f"attn.out is {shape(out)}.", step("attn.weights", "attn.z", "attn.out")),
        ("norm placement", f"{m.get('norm') or 'A norm'}: {'each sub-layer reads a normalised copy of the stream' if placement == 'pre' else 'the stream is normalised after each sub-layer is added'} "
                           f"(ln1.out is {shape(ln)}).", step("ln1.out", "ln2.out")),
        ("residual", f"What attention computed is added to the stream, not written over it ({m.get('residual') or 'sequential'}"
                     f"): {shape(mid)}.", step("resid_mid", "resid_post")),
        ("MLP", f"A two-layer network per token ({m.get('mlp') or 'MLP'}) widens each vector to d_ff = {m.get('d_ff')} and "
                f"back ({shape(mlp)} in the middle); blocks repeat attention + MLP {m.get('n_layers')} times.",
         step("mlp.pre", "mlp.post", "mlp.out")),
        ("logits", f"After the final norm, the unembedding scores every vocabulary entry at every position: {shape(logits)}.",
         step("final_norm.out", "logits")),
        ("softmax", f"The softmax turns the last position's logits into the next-token distribution ({shape(probs)}); "
                    "the temperature control below divides the logits before it.", step("probs")),
    ]
    return [c for c in out_cards if c[2]]


def explained(report: dict) -> str:
    items = cards(report)
    if not items:
        return ""
    parts = []
    for n, (title, text, steps) in enumerate(items, start=1):
        links = " ".join(f'<a class="step-link mono" href="#step={esc(r["name"])}" data-step="{esc(r["name"])}">'
                         f'{esc(r["name"])}</a>' for r in steps)
        parts.append(f'<li class="explain" data-n="{n}"><strong>{n} · {esc(title)}</strong> {esc(text)} '
                     f'<span class="dim">steps: {links}</span></li>')
    return ('<details class="explained" open><summary>the steps in order, explained, with this model\'s shapes '
            '<button id="guided" type="button">guided: one step at a time</button> '
            '<button id="guided-next" type="button" hidden>next step</button></summary>'
            f'<ol class="explained">{"".join(parts)}</ol></details>')
