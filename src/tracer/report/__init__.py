"""What `tracer run` shows, as plain JSON-ready data: the screen renders it, `--json` prints it.

Building the content once and rendering it twice keeps the two views in agreement.
"""

from __future__ import annotations

from tracer.errors import TracerError
from tracer.numbers import json_safe
from tracer.report.attention import attention_report
from tracer.report.card import model_card
from tracer.report.distribution import lens_report, resolve_position, top_k_report
from tracer.report.flow import flow_plan, step_records
from tracer.report.mask import mask_report, resolve_layer
from tracer.report.nonfinite import first_nonfinite
from tracer.report.options import RunOptions, ids_only_vocab
from tracer.report.pooled import pooled_report
from tracer.report.routing import routing_report
from tracer.report.target import better_variants, track_target
from tracer.report.tokens import token_rows, tokens_note
from tracer.report.values import values_report
from tracer.steps import matches

__all__ = ["RunOptions", "build_report", "html", "json_view"]


def html(trace, model=None, options: RunOptions | None = None) -> str:
    """The HTML report of a trace (what tracer report writes), as a string: one self-contained page.

    `model` (a tracer.Model) names every token id and adds the logit lens; without it the page names the
    trace's own tokens. The page builder sits above this room: imported here, lazily (a facade)."""
    from tracer.html import run_page
    from tracer.report.collect import add_page_data, vocab_from_trace
    from tracer.report.options import DEFAULT_SECTIONS

    if trace.meta.get("format") == "foreign" or not trace.meta.get("tokens") or "spec" not in trace.meta.get("model", {}):
        raise TracerError("this trace has no tracer metadata (tokens, model spec): there is no report to draw",
                          hint="make the trace with tracer run --save, or Model.run")
    vocab = model.tokenizer.describe_id if model is not None and model.tokenizer is not None else vocab_from_trace(trace.meta)
    if options is None:
        lm = model is not None and trace.meta["model"]["spec"].get("head", "lm") == "lm"
        options = RunOptions(sections=DEFAULT_SECTIONS + (("lens",) if lm else ()))
    report = build_report(trace, options, vocab=vocab, model=model)
    return run_page(add_page_data(report, trace, model, vocab))


def build_report(trace, options: RunOptions, vocab=ids_only_vocab, model=None) -> dict:
    """The content of every chosen section. `vocab` names token ids; `model` (weights) is only for the lens."""
    meta = trace.meta
    spec = meta["model"]["spec"]
    route = spec.get("route", "decoder")
    n_rows = len(meta["tokens"])
    row = options.batch_row + n_rows if options.batch_row < 0 else options.batch_row  # negative counts back
    if not 0 <= row < n_rows:
        raise TracerError(f"`batch_row` {options.batch_row} is out of range: the batch has {n_rows} row(s) "
                          f"(0..{n_rows - 1}, or -{n_rows}..-1 from the end)")
    sections = route_sections(options.sections, spec)
    stack, part = resolve_view(options.stack, options.attn, spec)
    sspec = spec["encoder"] if stack == "encoder" else spec
    named = None if vocab is ids_only_vocab else vocab  # names the padding's id with the tokenizer's own piece
    tokens = token_rows(meta, row, vocab=named)
    report: dict = {"sections": list(sections), "batch_row": row, "batch_size": n_rows, "dtype": meta.get("dtype"),
                    "prompt": (meta.get("prompts") or [None] * n_rows)[row], "route": route,
                    "reduced_to_stats": meta.get("reduced_to_stats", []),
                    "computed_in_blocks": meta.get("computed_in_blocks", [])}
    report["model"] = model_card(meta)
    report["warnings"] = run_warnings(meta)
    report["tokens"] = tokens
    report["tokens_note"] = tokens_note(tokens, report["prompt"])
    dec_tokens = token_rows(meta, row, "decoder_tokens", named) if route == "encoder-decoder" else None
    if dec_tokens is not None:
        report["decoder_tokens"] = dec_tokens
    report["other_rows"] = [_row_summary(meta["tokens"][b], b) for b in range(n_rows) if b != row]
    report["nonfinite"] = first_nonfinite(trace)
    layer = resolve_layer(options.layer, sspec["n_layers"])
    out_tokens = dec_tokens if dec_tokens is not None else tokens
    view_tokens = dec_tokens if stack == "decoder" and dec_tokens is not None else tokens
    focus = _focus(options.position, view_tokens)  # the query row the long-prompt windows centre on
    if options.position is None and spec.get("head") == "mlm":  # a masked LM's output is at its first mask
        focus = next((t["pos"] for t in view_tokens if is_mask_token(t)), focus)
    report["position"] = focus if view_tokens is tokens else _focus(None, tokens)
    if "steps" in sections:
        records = step_records(trace, spec)
        report["steps"] = [r for r in records if not options.steps or matches(r["name"], options.steps)]
        report["flow"] = flow_plan(records, options.steps, options.all_steps, options.layers)
    if "values" in sections:
        report["values"] = values_report(trace, options.steps, row)
    if "mask" in sections or "attention" in sections:
        mask = mask_report(trace, spec, row, layer, stack, "attn")
        cross = mask_report(trace, spec, row, layer, stack, "cross_attn") if stack == "decoder" else None
    if "mask" in sections:
        report["mask"] = dict(mask, focus=focus)  # long prompts show a window around the focus
        if cross is not None:
            report["cross_mask"] = cross
    if "attention" in sections:
        grid = (cross if part == "cross_attn" else mask)["grids"].get("keep")
        report["attention"] = attention_report(trace, sspec, row, layer, options.head, grid, stack, part)
        key_tokens = tokens if part == "cross_attn" or stack != "decoder" else dec_tokens
        row_tokens = dec_tokens if stack == "decoder" else tokens
        report["attention"]["labels"] = [t["token"] for t in key_tokens]
        report["attention"]["pad_positions"] = [t["pos"] for t in key_tokens if t["pad"]]
        if row_tokens is not key_tokens:
            report["attention"]["row_labels"] = [t["token"] for t in row_tokens]
            report["attention"]["row_pad_positions"] = [t["pos"] for t in row_tokens if t["pad"]]
        report["attention"]["focus"] = focus
        report["attention"]["top"] = options.attn_top
    if "pooled" in sections:
        report["pooled"] = pooled_report(trace, spec, row)
    if "routing" in sections:
        report["routing"] = routing_report(trace, spec, row, layer, tokens)
    if "top_k" in sections or "lens" in sections:
        key = "decoder_tokens" if dec_tokens is not None else "tokens"
        kind = "fill" if spec.get("head") == "mlm" else "next"
        positions = output_positions(options.position, out_tokens, kind)
        fills = [top_k_report(trace, row, p, options.top_k, vocab, options.target_id, options.target_text,
                              options.target_note, kind, key) for p in positions]
        dist = fills[0]
        if "target" in dist:
            dist["target"]["better_variants"] = better_variants(trace, row, positions[0], dist["target"],
                                                                options.target_variants)
        if "top_k" in sections:
            report["distribution"] = {k: v for k, v in dist.items() if k != "top_k"}
            report["top_k"] = dist["top_k"]
            if len(fills) > 1:
                report["fills"] = [{"distribution": {k: v for k, v in f.items() if k != "top_k"}, "top_k": f["top_k"]}
                                   for f in fills]
        if "lens" in sections:
            final_top = dist["top_k"][0]["id"] if dist["top_k"] else None
            report["lens"] = (lens_report(trace, model, row, positions[0], final_top, vocab) if final_top is not None
                              else {"layers": [], "missing": dist.get("missing")})
            if "target" in dist and report["lens"]["layers"]:
                track_target(report["lens"], trace, model, row, positions[0], dist["target"])
    if "cost" in sections:
        from tracer.arch.spec import Spec
        from tracer.report.cost import measured_cost

        report["cost"] = measured_cost(trace, model.spec if model is not None else Spec.from_dict(spec))
    return report


def run_warnings(meta: dict) -> list[dict]:
    """The run's warnings as the trace recorded them ({code, level, message, data}), e.g. positions past
    max_position_embeddings with --allow-long; a hand-written trace's malformed entries are left out."""
    found = meta.get("warnings")
    if not isinstance(found, list):
        return []
    return [w for w in found if isinstance(w, dict) and isinstance(w.get("message"), str)]


def route_sections(sections: tuple[str, ...], spec: dict) -> tuple[str, ...]:
    """The sections this route can show: no next token without a head (the pooled vector instead), no lens
    without a decoder stack."""
    if spec.get("head") == "none":
        if "lens" in sections:
            raise TracerError("`lens` reads a decoder stack through the LM head; this encoder has no head",
                              hint="its output is the pooled sentence vector (shown by default)")
        sections = tuple("pooled" if s == "top_k" else s for s in sections)
    elif "pooled" in sections:
        raise TracerError("this model has a head: it gives token distributions, not a pooled sentence vector")
    if spec.get("route") == "encoder" and "lens" in sections:
        raise TracerError("`lens` reads a decoder stack (each layer through the final norm and LM head); "
                          "an encoder's MLM head reads only its last layer", hint="drop `lens`")
    if not spec.get("moe") and len(sections) > 1:  # routing: mixture-of-experts models only
        sections = tuple(s for s in sections if s != "routing")
    return tuple(dict.fromkeys(sections))


def resolve_view(stack: str | None, attn: str | None, spec: dict) -> tuple[str, str]:
    """(stack, part) the mask and attention views show: "" and "attn" for single-stack models; for
    encoder-decoder models the decoder's cross-attention unless asked otherwise."""
    if spec.get("route") != "encoder-decoder":
        if stack not in (None, ""):
            raise TracerError(f"`stack` {stack}: this model has one stack", hint="`stack` applies to encoder-decoder models")
        if attn not in (None, "self"):
            raise TracerError(f"`attn` {attn}: this model has self-attention only", hint="cross-attention exists in encoder-decoder models")
        return "", "attn"
    stack = stack or "decoder"
    if stack not in ("encoder", "decoder"):
        raise TracerError(f"`stack` must be encoder or decoder, not {stack!r}")
    if attn not in (None, "self", "cross"):
        raise TracerError(f"`attn` must be self or cross, not {attn!r}")
    if stack == "encoder":
        if attn == "cross":
            raise TracerError("`attn` cross: the encoder has no cross-attention", hint="`stack` decoder `attn` cross")
        return stack, "attn"
    return stack, "attn" if attn == "self" else "cross_attn"


MASK_PIECES = ("[MASK]", "<mask>")


def is_mask_token(t: dict) -> bool:
    """A mask token, also when its piece carries the space its lstrip took (RoBERTa's " <mask>")."""
    return t["piece"].strip() in MASK_PIECES and not t["pad"]


def output_positions(position: int | None, tokens: list[dict], kind: str) -> list[int]:
    """Where the output section reads the distribution: for an MLM every mask token (or --position), else one."""
    if kind != "fill" or position is not None:
        return [resolve_position(position, tokens)]
    masks = [t["pos"] for t in tokens if is_mask_token(t)]
    if not masks:
        raise TracerError("this is a masked-LM model and the prompt has no mask token: nothing to fill in",
                          hint='put [MASK] (or <mask>) where a word is missing, e.g. "The capital of France is [MASK]." '
                               "or choose a position with --position N")
    return masks


def _focus(position: int | None, tokens: list[dict]) -> int | None:
    """--position (or the last real token) in these tokens; None when the default has nothing to point at."""
    try:
        return resolve_position(position, tokens)
    except TracerError:
        if position is None:
            return None
        raise


def _row_summary(row_tokens: list[dict], b: int) -> dict:
    pads = sum(1 for t in row_tokens if t.get("pad"))
    return {"row": b, "tokens": len(row_tokens) - pads, "pads": pads}


def json_view(report: dict) -> dict:
    """The report for programs: the screen's folding plan reduced to which blocks were folded."""
    out = {k: v for k, v in report.items() if k != "flow"}
    if "flow" in report:
        out["folding"] = {k: v for k, v in report["flow"].items() if k != "rows"}
    return json_safe(out)
