"""`tracer generate` for people: the prefill folded, one row per new token, the cache growing, the text."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracer.checkpoint.pieces import byte_group, shown_piece, split_utf8
from tracer.model.inputs import LONG_CODE
from tracer.render.columns import prob_column
from tracer.render.theme import CAUTION, DIM, OK, PARTIAL, SPECIAL, WARN, bare_shape, calm, caution_lines, heading, num, short

STRIP_MAX = 32  # cache slots drawn one character each; longer caches are summarised
KEEP, PAD, OUTSIDE = "■", "·", "×"


def render_prefill(gen, model_line: str, number: int = 1) -> Group:
    """The prompt in one pass, folded to a few lines."""
    p = gen.prefill
    b, n = p["shape"]
    panel = gen.steps[0].panel
    lines = [Text(model_line, style=DIM), *caution_lines(gen.warnings),
             Text(gen.sampling.describe() + _eos_text(gen), style=DIM)]
    for r, row in enumerate(p["tokens"]):
        t = Text(f"  row {r}: ")
        for tok in row:
            piece = "<pad>" if tok.get("pad") else (tok.get("text") or tok["piece"]) if not tok.get("special") else tok["piece"]
            t.append(piece + " ", style=DIM if tok.get("pad") else SPECIAL if tok.get("special") else "")
        lines.append(t)
    if p["encoder_shape"] is not None:
        eb, en = p["encoder_shape"]
        lines.append(Text(f"  encoder: ids [{eb},{en}] ran once -> encoder_out [{eb},{en},d_model]; every decoder block's "
                          f"cross-attention K and V computed once: {bare_shape(panel['cross_shape'])}"))
    where = "decoder start" if p["encoder_shape"] is not None else "prompt"
    lines.append(Text(f"  {where} ids [{b},{n}] -> every block in one pass, causal mask -> logits [{b},{n},vocab]; "
                      f"K and V cache filled with {n} position{'s' if n != 1 else ''} per layer {bare_shape(panel['k_shape'])}"
                      f"   {gen.steps[0].seconds * 1e3:.1f} ms"))
    if p["steps_recorded"] is not None:
        lines.append(calm(f"{p['steps_recorded']} steps recorded (prefill under the usual names, step t under decode.{{t}}.)"))
    cap = "the whole prompt at once, as tracer run shows it (tracer run PROMPT unfolds it); its last position picks token 0"
    return Group(heading(number, "Prefill", cap), *lines)


def _eos_text(gen) -> str:
    return f"; stops at EOS {gen.eos_ids}" if gen.eos_ids else "; EOS ignored"


def render_steps(gen, number: int = 2, width: int = 120, vocab=None) -> Group:
    """One row per new token (per batch row); token ids only when the terminal is wide enough.
    vocab (the tokenizer's describe_id): tokens shown as `tracer run` shows them (`␣cat`, `<e5 8e>`)."""
    check = gen.recompute_max_abs() is not None
    ids = width >= 100
    multi = len(gen.rows) > 1
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
    for col, just in (("t", "right"), ("row", "right"), ("pos", "right"), ("fed", "left"), ("cache", "left"),
                      ("chosen", "left"), ("p", "right"), ("2nd" if width < 100 else "runner-up", "left"), ("p₂", "right")):
        if col == "row" and not multi:
            continue
        table.add_column(col, justify=just, no_wrap=True)
    if check:
        table.add_column("max|Δ|", justify="right")
    timed = width >= 80
    if timed:
        table.add_column("ms", justify="right")
    limit = past_limit(gen)
    chosen = [rs for st in gen.steps for rs in st.rows if rs is not None]
    p_f, p2_f = prob_column(rs.prob for rs in chosen), prob_column(rs.runner_prob for rs in chosen)  # one format a column
    for st in gen.steps:
        first = True
        for r, rs in enumerate(st.rows):
            if rs is None:
                continue
            first_in = "start" if gen.prefill["encoder_shape"] is not None else "prompt"  # the decoder start token
            fed = first_in if rs.fed_id is None else _tok(gen, rs.fed_id, ids, vocab)
            cells = [str(st.t) if first else ""] + ([str(r)] if multi else []) + [
                _position(rs.position, limit), fed, f"{st.cache_before}→{st.cache_after}" if first else "",
                _tok(gen, rs.token_id, ids, vocab), p_f(rs.prob), _tok(gen, rs.runner_id, ids, vocab), p2_f(rs.runner_prob)]
            if check:
                cells.append(num(rs.recompute_max_abs, 2))
            if timed:
                cells.append(f"{st.seconds * 1e3:.1f}" if first else "")
            table.add_row(*cells)
            first = False
    cap = "step 0 is the prefill; step t feeds token t-1 and reads every earlier key and value from the cache"
    legend = ([Text(f"* position past max_position_embeddings ({limit}): the model was not trained there", style=CAUTION)]
              if limit is not None and any(rs and rs.position >= limit for st in gen.steps for rs in st.rows) else [])
    return Group(heading(number, "Decoding, one token per step", cap), table, *legend)


def past_limit(gen) -> int | None:
    """The decoder's max_position_embeddings when this generation ran past it (--allow-long), else None."""
    limits = [w["data"]["limit"] for w in gen.warnings
              if w.get("code") == LONG_CODE and (w.get("data") or {}).get("stack") != "encoder"]
    return min(limits) if limits else None


def _position(pos: int, limit: int | None) -> Text:
    """The fed token's position, starred when it is past the limit."""
    if limit is not None and pos >= limit:
        return Text(f"{pos} *", style=CAUTION)
    return Text(str(pos))


def _tok(gen, tid: int, with_id: bool = True, vocab=None) -> str:
    if vocab is not None:
        d = vocab(tid)
        shown = shown_piece(d["piece"], d["bytes"], d["special"])
    else:
        text = gen.texts.get(tid, f"<{tid}>")
        shown = text.replace("\n", "\\n") if text.strip() else repr(text)
    return short(f"{shown} ({tid})" if with_id else shown, 24 if with_id else 10)


def render_cache(gen, number: int = 3, batch_row: int | None = None) -> Group:
    """One layer's cache after each step: K and V growing, the one query row, the slots the mask blocks, bytes."""
    first = gen.steps[0].panel
    window = first["window"]
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
    for col in ("t", "K and V", "query row", "slots seen", "bytes"):
        table.add_column(col, no_wrap=True, justify="right" if col in ("t", "bytes") else "left")
    rows = range(len(gen.rows)) if batch_row is None else [batch_row]
    for st in gen.steps:
        p = st.panel
        strips = Text()
        for k, r in enumerate(rows):
            if k:
                strips.append("\n")
            if len(rows) > 1:
                strips.append(f"{r}: ", style=DIM)
            strips.append_text(_strip(p["blocked"][r], p["k_shape"][2]))
        table.add_row(str(st.t), bare_shape(p["k_shape"]), bare_shape(p["scores_shape"]), strips, _bytes(p["bytes_total"]))
    last = gen.steps[-1].panel
    legend = Text(f"  {KEEP} seen   {PAD} padding (left)", style=DIM)  # the words of the man page's legend
    if window is not None:
        legend.append(f"   {OUTSIDE} older than the sliding window of {window}", style=DIM)
    notes = [legend, Text(f"  the cache holds {_bytes(last['bytes_per_token'])} per position (K and V, every layer, "
                          f"every row); {_bytes(last['bytes_total'])} in total after step {gen.steps[-1].t}", style=DIM)]
    if last["cross_shape"] is not None:
        notes.append(Text(f"  cross-attention K and V {bare_shape(last['cross_shape'])} per layer, computed once from "
                          "the encoder output (included in the total)", style=DIM))
    cap = (f"layer {first['layer']}: K and V (each) are [batch, kv_heads, past + 1, d_head]; "
           "the new token's query row of scores is [batch, heads, 1, past + 1]")
    return Group(heading(number, "KV cache", cap), table, *notes)


def _strip(blocked: dict, kv_len: int) -> Text:
    pad, outside = set(blocked["pad"]), set(blocked["window"])
    if kv_len > STRIP_MAX:
        seen = kv_len - len(pad) - len(outside)
        t = Text(f"{seen} of {kv_len}")
        if pad:
            t.append(f"; {len(pad)} padding", style=DIM)
        if outside:
            t.append(f"; {len(outside)} outside the window", style=DIM)
        return t
    t = Text()
    for j in range(kv_len):
        t.append(PAD if j in pad else OUTSIDE if j in outside else KEEP, style=DIM if j in pad or j in outside else "")
    return t


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def new_text(row, vocab=None) -> Text:
    """What was generated: the decoded text; where it holds special tokens or bytes that are only part of a
    character (U+FFFD in the decoded text), the tokens' bytes read as `tracer run` shows them: whole characters
    as text, partial ones as `<e5 8e>`, specials as their piece (`<pad>`, `</s>`)."""
    if vocab is None or (row.text and "\ufffd" not in row.text and not any(vocab(i)["special"] for i in row.new_ids)):
        return Text(row.text if row.text else " ".join(f"<{i}>" for i in row.new_ids), style="bold")
    out, run = Text(style="bold"), b""

    def flush(raw: bytes) -> None:
        for part in split_utf8(raw):
            out.append(byte_group(part) if isinstance(part, bytes) else part, style=PARTIAL if isinstance(part, bytes) else "")

    for i in row.new_ids:
        d = vocab(i)
        if d["special"]:
            flush(run)
            run = b""
            out.append(d["piece"], style=SPECIAL)
        else:
            run += bytes.fromhex(d["bytes"])
    flush(run)
    return out


def render_text(gen, dtype: str, number: int = 4, vocab=None) -> Group:
    lines = []
    for r, row in enumerate(gen.rows):
        t = Text(f"  row {r}: " if len(gen.rows) > 1 else "  ")
        t.append(gen.prompts[r] if gen.prompts[r] else f"ids {row.prompt_ids} -> ", style=DIM)
        t.append_text(new_text(row, vocab))
        t.append(f"   [{len(row.new_ids)} new, stop: {row.stop}]", style=DIM)
        lines.append(t)
    worst = gen.recompute_max_abs()
    if worst is not None:
        bound = gen.check_bound(dtype)
        ok = worst <= bound
        lines.append(Text.assemble(
            ("  cached vs recomputed without a cache: ", ""),
            (f"max |Δ logit| = {num(worst, 2)}", "bold"),
            (f" over {len(gen.steps)} steps; bound {num(bound, 2)} ({dtype}: {_tol(dtype)} × max(1, |logit|)) ", DIM),
            ("✓ the same computation" if ok else "✗ beyond the bound", OK if ok else WARN)))
    return Group(heading(number, "Text", "the prompt (dim) and what was generated"), *lines)


def _tol(dtype: str) -> str:
    return "1e-5" if dtype == "float32" else "1e-10"


def render_cost(costs: list[dict], number: int) -> Group:
    """Per pass: FLOPs with the cache beside the measured time, and what the same token costs without a cache."""
    caption = ("FLOPs counted from the config (tracer cost); step 0 is the prefill. Without a cache every step "
               "recomputes all positions so far: its cost grows with the length, the cached step's barely does.")
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
    for col in ("t", "new", "keys", "FLOPs", "of it q·k, w·v", "time", "GFLOP/s", "no cache", "saved"):
        table.add_column(col, justify="right", no_wrap=True)
    for c in costs:
        rate = "" if c["gflops_per_s"] is None else f"{c['gflops_per_s']:.2f}"
        saved = f"{c['uncached_flops'] / c['flops']:.1f}x" if c["flops"] else ""
        table.add_row(str(c["t"]), str(c["new_positions"]), str(c["keys"]), f"{c['flops']:.3g}",
                      f"{c['attention_pair_flops']:.3g}", f"{c['seconds'] * 1e3:.1f} ms", rate,
                      f"{c['uncached_flops']:.3g}", saved)
    decoding = [c for c in costs if c["t"] > 0]
    parts: list = [heading(number, "Cost per pass", caption), table]
    if decoding:
        with_cache = sum(c["flops"] for c in decoding)
        without = sum(c["uncached_flops"] for c in decoding)
        parts.append(Text(f"decoding {len(decoding)} tokens: {with_cache:.3g} FLOPs with the cache, {without:.3g} "
                          f"without ({without / with_cache:.1f}x)", style=DIM))
    return Group(*parts)
