"""The model card and the page header: what model, what prompt, what was computed."""

from __future__ import annotations

from tracer.html.common import esc, fmt

CARD_ROWS = (("name", "name"), ("family", "family"), ("route", "route"), ("parameters", "params"),
             ("layers", "n_layers"), ("d_model", "d_model"), ("heads", "n_heads"), ("kv heads", "n_kv_heads"),
             ("d_head", "d_head"), ("d_ff", "d_ff"), ("vocabulary", "vocab"), ("attention", "attention"),
             ("positions", "positions"), ("norm", "norm"), ("MLP", "mlp"), ("residual", "residual"),
             ("tied embeddings", "tied_embeddings"), ("output", "head"), ("weights stored as", "weight_dtype"),
             ("quantization", "quantization"),
             ("computed in", "compute_dtype"))


HEADER_PROMPT = 160  # characters of the prompt the header shows


def short_prompt(prompt: str) -> str:
    return prompt if len(prompt) <= HEADER_PROMPT else prompt[:HEADER_PROMPT - 1] + "…"


def header(report: dict) -> str:
    model = report.get("model") or {}
    prompt = report.get("prompt")
    shown = (f'<p class="prompt">prompt: <strong>{esc(short_prompt(prompt))}</strong>'
             + (f' <span class="dim">({len(prompt):,} characters; the tokens section has them all)</span>'
                if len(prompt) > HEADER_PROMPT else "") + "</p>" if prompt is not None
             else '<p class="prompt dim">token ids given directly (no prompt text)</p>')
    batch = ""
    if report.get("batch_size", 1) > 1:
        batch = (f'<p class="note">batch of {report["batch_size"]} rows; this page shows row {report.get("batch_row", 0)}'
                 f' (tracer run --batch-row N for another)</p>')
    sections = report.get("sections") or ()
    warned = "" if "model" in sections else warning_lines(report)  # the card carries them when it is shown
    return (f"<h1>tracer · {esc(model.get('name') or 'model')}</h1>{shown}{batch}{warned}")


def warning_lines(report: dict) -> str:
    """The run's warnings (positions past max_position_embeddings with --allow-long), one line each."""
    return "".join(f'<p class="warn" data-code="{esc(w.get("code", ""))}">warning: {esc(w["message"])}</p>'
                   for w in report.get("warnings") or ())


def section(report: dict):
    card = report.get("model")
    if not card:
        return None
    rows = []
    for label, key in CARD_ROWS:
        value = card.get(key)
        if value is None:
            continue
        text = "yes" if value is True else "no" if value is False else value if isinstance(value, str) else fmt(value)
        rows.append(f"<dt>{esc(label)}</dt><dd>{esc(text)}</dd>")
    enc = card.get("encoder")
    if enc:
        text = ", ".join(f"{k.replace('n_', '')} {v}" for k, v in enc.items() if v is not None)
        rows.append(f"<dt>encoder stack</dt><dd>{esc(text)}</dd>")
    return "model", f'<dl class="card">{"".join(rows)}</dl>{warning_lines(report)}'
