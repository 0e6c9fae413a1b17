"""`tracer mask`: the mask lab. A mask as a framework reads it -> the keep/block pattern on [B,H,Q,K]."""

from __future__ import annotations

import json
import sys
from typing import Optional

import numpy as np
import typer

from tracer.cli.common import handle_errors, make_console, parse_int_list, rendered, split_list
from tracer.errors import TracerError
from tracer.numbers import json_safe

HELP = (
    "Show what an attention mask does to the scores [B,H,Q,K], as a given framework reads it.\n\n"
    "Prints the input, each broadcast step (op: shape -> shape, with the role B/H/Q/K each axis lands on), the "
    "keep/block pattern per distinct (batch, head) slice, fully masked rows and what each backend returns for them, "
    "and warnings ML001-ML013. Exit 0; 1 when --check-weights fails, or with --strict when a warning fired; 2 when "
    "the framework itself would reject the mask (the message says what it would say, and why).\n\n"
    "Examples:\n\n"
    "tracer mask --list\n"
    "tracer mask -c torch-mha-bool --mask \"[[0,1],[0,0]]@bool\" --scores 2,4,2,2\n"
    "tracer mask -c hf-2d --mask \"[[0,0,1,1],[1,1,1,1]]\" --scores 2,1,4,4 --past 0\n"
    "tracer mask -c flash-attn --is-causal --scores 1,1,2,5\n"
    "tracer mask -c hf-4d-sdpa --mask m.npy --scores 2,8,4,4 --compare jax-bool\n"
    "tracer mask -c hf-2d --mask \"[[1,1,1,1,1]]\" --scores 1,1,5,5 --window 2 --json\n"
    "tracer mask -c hf-2d --check-weights t.safetensors:blocks.0.attn.weights\n\n"
    "# one attention row worked by hand\n"
    "tracer mask --row 1.2,2.0,0.4 --tokens 猫,追,球 --query 1\n\n"
    "LITERAL: nested lists of 0/1, true/false, T/F, ints, floats, inf, -inf, nan, min (= finfo(score dtype).min), "
    "with an optional dtype suffix, e.g. \"[[1,0],[1,1]]@bool\". Without a suffix the convention's natural dtype "
    "is used."
)

MAIN, GEN, CONV, OUT, ROW = "Mask", "Generated parts", "Convention options", "Output", "One row by hand"


def register(app: typer.Typer) -> None:
    app.command("mask", help=HELP, no_args_is_help=True)(mask_command)


@handle_errors
def mask_command(
    convention: Optional[str] = typer.Option(None, "--convention", "-c", help="How the mask is read (see --list).", rich_help_panel=MAIN),
    mask: Optional[str] = typer.Option(None, "--mask", "-m", help="LITERAL, FILE.npy, FILE.npz:KEY, a keyword (mlx 'causal', flex predicates) or none.", rich_help_panel=MAIN),
    scores: Optional[str] = typer.Option(None, "--scores", help="Score shape B,H,Q,K (taken from --check-weights when omitted).", rich_help_panel=MAIN),
    mask_dtype: Optional[str] = typer.Option(None, "--mask-dtype", help="Dtype of a LITERAL: bool, int64, uint8, float16, bfloat16, float32...", rich_help_panel=MAIN),
    score_dtype: str = typer.Option("float32", "--score-dtype", help="Dtype the scores and fills live in: float32, float16, bfloat16, float64.", rich_help_panel=MAIN),
    list_conventions: bool = typer.Option(False, "--list", help="List the conventions with one-line semantics.", rich_help_panel=MAIN),
    is_causal: bool = typer.Option(False, "--is-causal", help="Add the framework's causal mask (is_causal / causal=True / use_causal_mask).", rich_help_panel=GEN),
    causal_align: Optional[str] = typer.Option(None, "--causal-align", help="top-left or bottom-right (default: the convention's own).", rich_help_panel=GEN),
    past: Optional[int] = typer.Option(None, "--past", help="Tokens already in the cache: query i sits at key slot i + past (default K-Q).", rich_help_panel=GEN),
    window: Optional[int] = typer.Option(None, "--window", help="Sliding window of W keys INCLUDING the query itself.", rich_help_panel=GEN),
    window_lr: Optional[str] = typer.Option(None, "--window-lr", help="L,R: keep q-L..q+R inclusive (-1 = unbounded), FlashAttention/JAX style.", rich_help_panel=GEN),
    positions: Optional[str] = typer.Option(None, "--positions", help="ggml: Q_POS,K_POS as files or literals, e.g. \"[3,4],[0,1,2,3,4]\" (-1 = empty cell).", rich_help_panel=GEN),
    hf_impl: str = typer.Option("sdpa", "--hf-impl", help="hf-2d backend: sdpa, eager or flash.", rich_help_panel=CONV),
    bidirectional: bool = typer.Option(False, "--bidirectional", help="hf-2d encoder mask; T5 encoder buckets; ggml non-causal.", rich_help_panel=CONV),
    kpm: Optional[str] = typer.Option(None, "--kpm", help="torch-mha-*: a key_padding_mask (N,S) next to attn_mask (True = pad).", rich_help_panel=CONV),
    need_weights: bool = typer.Option(True, "--need-weights/--no-need-weights", help="torch MHA: need_weights (NaN vs zeros on fully masked rows).", rich_help_panel=CONV),
    heads: Optional[int] = typer.Option(None, "--heads", help="ALiBi: the model's total heads the slopes are computed for (default H).", rich_help_panel=CONV),
    alibi: bool = typer.Option(False, "--alibi", help="flash-attn: add alibi_slopes; ggml: scale finite mask values by the slopes.", rich_help_panel=CONV),
    alibi_form: str = typer.Option("fa", "--alibi-form", help="alibi: fa (-slope|i-j|), bloom (slope*j) or ggml.", rich_help_panel=CONV),
    buckets: int = typer.Option(32, "--buckets", help="t5-relbias: number of buckets.", rich_help_panel=CONV),
    max_distance: int = typer.Option(128, "--max-distance", help="t5-relbias: max distance.", rich_help_panel=CONV),
    fa_version: str = typer.Option("2.1", "--fa-version", help="flash-attn: 2.0 (top-left causal) or 2.1 (bottom-right, and later).", rich_help_panel=CONV),
    keras2: bool = typer.Option(False, "--keras2", help="keras-mha: tf-keras 2 (additive -1e9) instead of Keras 3.", rich_help_panel=CONV),
    ggml_ne_order: bool = typer.Option(False, "--ggml-ne-order", help="ggml-kq-mask given in ggml ne order [n_kv, n_tok, 1, n_stream].", rich_help_panel=CONV),
    q_lengths: Optional[str] = typer.Option(None, "--q-lengths", help="jax-seqlens: query_seq_lengths, e.g. 3,4.", rich_help_panel=CONV),
    fill: Optional[str] = typer.Option(None, "--fill", help="bert-extended / --keras2 fill value (a number or min).", rich_help_panel=CONV),
    soft_threshold: float = typer.Option(-1e4, "--soft-threshold", help="Finite values <= this count as (soft) blocks.", rich_help_panel=CONV),
    score_range: Optional[float] = typer.Option(None, "--score-range", help="Largest |score| expected; ML003 warns for fills above -10x this.", rich_help_panel=CONV),
    compare_to: Optional[str] = typer.Option(None, "--compare", help="A second convention (the port target): XOR grid and a one-line verdict.", rich_help_panel=OUT),
    mask2: Optional[str] = typer.Option(None, "--mask2", help="The mask for --compare (default: the same --mask).", rich_help_panel=OUT),
    check: Optional[str] = typer.Option(None, "--check-weights", help="TRACE:STEP (or W.npy): check recorded [B,H,Q,K] attention weights against the mask; exit 1 when a check fails.", rich_help_panel=OUT),
    show: Optional[str] = typer.Option(None, "--show", help="Select slices/rows, e.g. b=0,h=0..1 or q=0..7,k=0..15.", rich_help_panel=OUT),
    tokens: Optional[str] = typer.Option(None, "--tokens", help="Comma-separated token labels for keys (grid and --row).", rich_help_panel=OUT),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for programs.", rich_help_panel=OUT),
    save: Optional[str] = typer.Option(None, "--save", help="Write keep, soft, fill, bias and additive to OUT.npz.", rich_help_panel=OUT),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when a warning fired.", rich_help_panel=OUT),
    row: Optional[str] = typer.Option(None, "--row", help="Scores of ONE row, e.g. 1.2,2.0,0.4: worked softmax, masked right and wrong.", rich_help_panel=ROW),
    query: Optional[int] = typer.Option(None, "--query", help="With --row: causal mask for the query at this position (keys 0..query; negative counts back from the last key).", rich_help_panel=ROW),
    row_keep: Optional[str] = typer.Option(None, "--row-keep", help="With --row: explicit keep flags, e.g. 1,1,0.", rich_help_panel=ROW),
    export_html: Optional[str] = typer.Option(None, "--export-html", help="With --row: also write the row as an interactive page (toggle the mask and each key; opens offline).", rich_help_panel=ROW),
) -> None:
    console = make_console()
    token_list = split_tokens(tokens)
    if list_conventions:
        return list_command(console, as_json)
    if row is not None:
        return row_command(console, row, token_list, query, row_keep, as_json, export_html)
    if export_html is not None:
        raise TracerError("--export-html goes with --row (one row worked by hand)")
    if convention is None:
        raise TracerError("--convention NAME is required", hint="tracer mask --list shows them")
    if save:
        check_save(save, reading=input_files(mask, mask2, check))
    from tracer.masks.check_weights import check_weights, load_weights
    from tracer.masks.compare import compare
    from tracer.masks.conventions import canonical_mask
    from tracer.masks.options import MaskOptions

    weights = w_scores = w_label = s_label = None
    if check:
        weights, w_scores, w_label, s_label = load_weights(check)
    shape = score_shape(scores, weights)
    opts = MaskOptions(
        score_dtype=score_dtype, mask_dtype=mask_dtype, is_causal=is_causal, causal_align=causal_align, past=past,
        window=window, window_lr=pair(window_lr), positions=parse_positions(positions), hf_impl=hf_impl,
        bidirectional=bidirectional, heads=heads, alibi=alibi, alibi_form=alibi_form, buckets=buckets,
        max_distance=max_distance, fa_version=fa_version, keras2=keras2, ggml_ne_order=ggml_ne_order, kpm=kpm,
        q_lengths=tuple(parse_int_list(q_lengths, "--q-lengths")) if q_lengths else None, need_weights=need_weights,
        fill=parse_fill(fill, score_dtype), soft_threshold=soft_threshold, score_range=score_range,
    )
    result = canonical_mask(convention, mask, shape, opts=opts)
    comparison = other = None
    if compare_to:
        other = canonical_mask(compare_to, mask2 if mask2 is not None else mask, shape, opts=opts)
        comparison = compare(result, other)
    elif mask2 is not None:
        raise TracerError("--mask2 goes with --compare NAME2")
    checked = check_weights(result, weights, w_scores, w_label, s_label) if weights is not None else None
    fired = result.fired() or (other is not None and other.fired())
    failed_check = checked is not None and checked.failed()  # like tracer diff: a failed check is exit 1
    code = 1 if failed_check or (strict and fired) else 0
    if as_json:
        out = result.to_json()
        if comparison is not None:
            out["compare"] = comparison.to_json()
            out["compare"]["warnings"] = [w.to_json() for w in other.warnings]
        if checked is not None:
            out["check_weights"] = checked.to_json()
        out["exit_status"] = code
        text = json_text(out)
    else:
        text = rendered(console, lambda: show_result(console, result, comparison, other, checked, show, token_list))
    if save:  # after the screen is made: a failure leaves no file
        save_npz(save, result)
    console.file.write(text)
    if save and not as_json:
        console.print(f"[dim]saved {save}[/]")
    if code:
        raise typer.Exit(code)


def show_result(console, result, comparison, other, checked, show, token_list) -> None:
    from tracer.render.mask_view import check_view, compare_view, result_view, warnings_view

    console.print(result_view(result, show, token_list))
    if comparison is not None:
        console.print()
        console.print(compare_view(comparison, show, token_list))
        extra = [w for w in other.warnings if w.code not in result.codes()]
        if extra:
            console.print(f"[bold]{other.convention}[/] adds:")
            console.print(warnings_view(extra))
    if checked is not None:
        console.print()
        console.print(check_view(checked))


# ---------- the two other modes ----------


def list_command(console, as_json: bool) -> None:
    from tracer.masks.conventions import ALIASES, CONVENTIONS

    if as_json:
        emit_json({"conventions": [{"name": c.name, "family": c.family, "accepts": c.accepts, "summary": c.summary}
                                   for c in CONVENTIONS.values()], "aliases": ALIASES})
        return
    from tracer.render.mask_row_view import ConventionsView

    console.print(ConventionsView(list(CONVENTIONS.values())))


def row_command(console, row: str, tokens, query, row_keep, as_json: bool, export_html: str | None = None) -> None:
    from tracer.masks.row import work_row

    if export_html is not None:
        from pathlib import Path

        from tracer.outputs import check_output

        check_output(Path(export_html), "--export-html")

    scores = parse_floats(row, "--row")
    keep = [bool(v) for v in parse_int_list(row_keep, "--row-keep")] if row_keep else None
    if keep is not None and query is not None:
        raise TracerError("give --query (causal) or --row-keep (explicit flags), not both")
    if query is not None and query < 0:  # negative counts back, as every index option
        if query < -len(scores):
            raise TracerError(f"--query {query} is outside the row's {len(scores)} keys (0..{len(scores) - 1}, "
                              f"or -{len(scores)}..-1 from the end)")
        query += len(scores)
    worked = work_row(scores, tokens, query, keep)
    if export_html is not None:
        write_row_page(export_html, worked, row, tokens, query, row_keep)
    if as_json:
        emit_json(worked.to_json())
        return
    from tracer.render.mask_row_view import worked_row_view

    console.print(worked_row_view(worked))


def write_row_page(path: str, worked, row: str, tokens, query, row_keep) -> None:
    """The worked row as the article's widget (tracer.html.row_page), written atomically."""
    from pathlib import Path

    from tracer.cli.run_cmd import write_text
    from tracer.html.row_page import row_page

    command = "tracer mask --row " + row + (f" --tokens {','.join(tokens)}" if tokens else "") + (
        f" --query {query}" if query is not None else "") + (f" --row-keep {row_keep}" if row_keep else "")
    write_text(Path(path), row_page(worked, command))
    print(f"wrote {path}", file=sys.stderr)


# ---------- parsing helpers ----------


def split_tokens(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [t.strip() for t in text.split(",")]


def parse_floats(text: str, what: str) -> list[float]:
    items = split_list(text, what)
    try:
        return [float(t) for t in items]
    except ValueError:
        raise TracerError(f"{what}: {text!r} is not a comma-separated list of numbers") from None


def score_shape(text: str | None, weights) -> tuple[int, ...]:
    if text:
        shape = tuple(parse_int_list(text, "--scores"))
        if len(shape) != 4:
            raise TracerError(f"--scores needs B,H,Q,K (4 sizes), got {len(shape)}")
        return shape
    if weights is not None:
        if weights.ndim != 4:
            raise TracerError(f"the weights are {weights.ndim}-D; --check-weights needs [B,H,Q,K]")
        return tuple(int(n) for n in weights.shape)
    raise TracerError("--scores B,H,Q,K is required", hint="e.g. --scores 1,1,4,4")


def pair(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    values = parse_int_list(text, "--window-lr")
    if len(values) != 2:
        raise TracerError("--window-lr takes two numbers L,R (-1 = unbounded)")
    return values[0], values[1]


def parse_fill(text: str | None, score_dtype: str) -> float | None:
    if text is None:
        return None
    if text.strip() == "min":
        from tracer.masks.literal import finfo_min

        return finfo_min(score_dtype)
    try:
        return float(text)
    except ValueError:
        raise TracerError(f"--fill {text!r}: a number or min") from None


def split_top_level(text: str) -> list[str]:
    """Split at commas outside brackets: '[0,1],[0,1,2]' -> ['[0,1]', '[0,1,2]']."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts]


def parse_positions(text: str | None):
    if text is None:
        return None
    from tracer.masks.literal import load_mask

    parts = split_top_level(text)
    if len(parts) != 2:
        raise TracerError("--positions takes Q_POS,K_POS (two files or two literals)")
    arrays = []
    for p in parts:
        a = load_mask(p).resolve(("int64",))
        if a.dtype.kind not in "iu":
            raise TracerError(f"--positions {p!r}: positions are integers")
        arrays.append(a.astype(np.int64))
    return tuple(arrays)


# ---------- output ----------


def emit_json(obj) -> None:
    sys.stdout.write(json_text(obj))


def json_text(obj) -> str:
    return json.dumps(json_safe(obj), ensure_ascii=False, allow_nan=False) + "\n"


def check_save(path: str, reading=()) -> None:
    from pathlib import Path

    from tracer.outputs import check_output

    if not path.endswith(".npz"):
        raise TracerError(f"--save {path!r}: the file must end in .npz")
    check_output(Path(path), "--save", reading)


def input_files(*specs: str | None) -> list:
    """The files --mask, --mask2 and --check-weights read (FILE.npy, FILE.npz:KEY, TRACE:STEP), so --save
    never overwrites one of them."""
    from pathlib import Path

    found = []
    for spec in specs:
        if not spec or spec.lstrip().startswith("["):
            continue
        for suffix in (".npz", ".npy", ".safetensors"):
            if suffix in spec:
                found.append(Path(spec[:spec.index(suffix) + len(suffix)]))
    return found


def save_npz(path: str, result) -> None:
    from pathlib import Path

    from tracer.outputs import write_output

    check_save(path)
    write_output(Path(path), lambda out: _write_npz(out, result))


def _write_npz(out, result) -> None:
    np.savez(out, keep=result.keep, soft=result.soft, fill=result.fill,
             bias=result.bias if result.bias is not None else np.zeros(result.score_shape),
             additive=result.additive(), convention=np.array(result.convention),
             score_shape=np.array(result.score_shape, dtype=np.int64))
