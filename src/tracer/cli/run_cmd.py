"""`tracer run`: load a checkpoint, run a prompt (or ids), show the whole story and optionally save the trace."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import List, Optional

import typer

from tracer.cli.common import (
    check_outputs, checkpoint_files, handle_errors, keep_globs, make_console, parse_int_list, rendered, split_list,
)
from tracer.cli.run_patch import ABLATE_HELP, PATCH_HELP
from tracer.errors import TracerError
from tracer.numbers import json_safe


def register(app: typer.Typer) -> None:
    app.command("run", help=RUN_HELP, no_args_is_help=False)(run)


RUN_HELP = """Run a prompt through a model and show how it became a next-token distribution.

Sections: model card, tokens, shape flow, mask, attention, next token (add --lens, --values).
Encoders show the masked-token guesses (MLM head) or the pooled sentence vector (no head); encoder-decoder
models the decoder's next token after --decoder-text. Quote a prompt that has spaces; several prompts run as a
padded batch with --batch (or when any of them has a space, so they were quoted one by one).

Examples (each comment line explains the command under it):

# the shipped model, the whole story
tracer run "春天来"

# open block 2; one attention head in full
tracer run "春天来" --layers 2 --layer 2 --head 1

# just one step and its numbers
tracer run "春天来" --steps 'blocks.2.attn.weights' --values

# where does the model start to expect 去?
tracer run "春天来" --target 去 --lens

# a long prompt: each query's 5 strongest keys, around position 40
tracer run "$(cat story.txt)" --attn-top 5 --position 40

# two prompts as one padded batch; show the second row
tracer run "Spring is" "Autumn was" --batch --pad-side left --batch-row 1

# zero one head's output: how the next token changes
tracer run "春天来" --ablate blocks.2.attn.head.0

# each row of a padded batch (left and right) against its prompt alone
tracer run --check-batch "春天来" "夏天"

# exact ids, a trace file and JSON
tracer run -m DIR --ids 5,17,42 --save t.safetensors --json > t.json

# a port's own mask
tracer run -m DIR --ids 5,17,42 --mask "[[1,1,0]]" --mask-convention hf-2d

# encoder with an MLM head
tracer run --model BERT_DIR "The capital of France is [MASK]."

# pooled embeddings of two sentences, cosine table
tracer run --model MINILM_DIR "A cat sat." "A dog sat."

# encoder-decoder: cross attention of the decoder
tracer run -m T5_DIR "translate: hello" --decoder-text "Hallo" --attn cross
"""


ALLOW_LONG_HELP = ("Let a rotary or relative-position model run past max_position_embeddings, where it was not trained; "
                   "the card, --json and the saved trace carry a warning. Learned position tables (GPT-2, BERT, OPT, "
                   "BART) end there and are refused all the same.")


@handle_errors
def run(
    prompts: Optional[List[str]] = typer.Argument(None, help="Prompt text (quote it). Several prompts form a padded batch with --batch, or when any of them contains a space."),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Checkpoint folder (config.json, *.safetensors, tokenizer.json). Default: the shipped model."),
    ids: Optional[List[str]] = typer.Option(None, "--ids", help="Exact token ids, comma separated; repeat for a batch. No tokenizer needed."),
    save: Optional[Path] = typer.Option(None, "--save", "-o", help="Write the trace to this .safetensors file."),
    dtype: str = typer.Option("float32", "--dtype", help="Compute dtype: float32 or float64."),
    keep: Optional[List[str]] = typer.Option(None, "--keep", help="Glob of steps whose tensors are kept whole (repeatable); statistics are kept for all. Default: all, unless that passes 2 GiB (long inputs), then the largest (attention scores) are kept as statistics."),
    pad_side: str = typer.Option("right", "--pad-side", help="Where a batch is padded: left or right."),
    no_special_tokens: bool = typer.Option(False, "--no-special-tokens", help="Do not add BOS/EOS/CLS (the tokenizer's post-processor)."),
    top_k: Optional[int] = typer.Option(None, "--top-k", min=1, help="How many next tokens to show (default 10; a model with no head has none: an error)."),
    position: Optional[int] = typer.Option(None, "--position", help="Position whose next token is shown (default: the last real token; negative counts back)."),
    target: Optional[str] = typer.Option(None, "--target", help="Also show the rank and probability of this token (text, or id:N)."),
    layer: Optional[int] = typer.Option(None, "--layer", help="Layer for the attention and mask views (default: the last; negative counts back)."),
    head: Optional[int] = typer.Option(None, "--head", help="One attention head in full, with its row sums (default: all heads, compactly; negative counts back)."),
    layers: Optional[str] = typer.Option(None, "--layers", help="Blocks shown in full in the shape flow, e.g. 1,3 or 0-2 (default: block 0)."),
    steps: Optional[List[str]] = typer.Option(None, "--steps", help="Show only steps matching this glob, e.g. 'blocks.1.attn.*' (repeatable)."),
    all_steps: bool = typer.Option(False, "--all", help="Unfold every block in the shape flow."),
    lens: bool = typer.Option(False, "--lens", help="Add the logit lens: each layer's residual read through the final norm and head."),
    values: bool = typer.Option(False, "--values", help="Add elided values (first and last few along each axis) of the selected steps."),
    cost: bool = typer.Option(False, "--cost", help="Add the measured time of each step beside its FLOPs, so the slow steps stand out (see tracer cost)."),
    only: Optional[List[str]] = typer.Option(None, "--only", help="Show only these sections: model, tokens, steps, values, mask, attention, routing, top_k, pooled, lens, cost."),
    batch_row: int = typer.Option(0, "--batch-row", help="Which batch row the tokens, mask, attention and distribution show (negative counts back: -1 is the last)."),
    mask: Optional[str] = typer.Option(None, "--mask", help="Run with this mask instead of the one tracer builds: a literal, FILE.npy or FILE.npz:KEY, read in --mask-convention (see tracer mask)."),
    mask_convention: Optional[str] = typer.Option(None, "--mask-convention", help="The convention --mask is written in, e.g. hf-2d, torch-sdpa-bool, torch-mha-bool (tracer mask --list)."),
    pair: Optional[str] = typer.Option(None, "--pair", help="A second text for every prompt (BERT family: the tokenizer's pair template marks it with token type 1)."),
    token_types: Optional[List[str]] = typer.Option(None, "--token-types", help="Segment ids per token, comma separated; repeat per batch row (BERT family)."),
    decoder_text: Optional[List[str]] = typer.Option(None, "--decoder-text", help="Encoder-decoder: the decoder's input after its start token (default: the start token only); repeat for one per prompt."),
    decoder_ids: Optional[List[str]] = typer.Option(None, "--decoder-ids", help="Encoder-decoder: the decoder's input ids, comma separated (the start token included); repeat for one row per prompt, padded as the prompts are."),
    positions: Optional[str] = typer.Option(None, "--positions", help="Position ids: from-mask (cumsum(mask) - 1) or index (0..n-1). Default: the family's rule, as transformers."),
    stack: Optional[str] = typer.Option(None, "--stack", help="Encoder-decoder: which stack the mask and attention views show: encoder or decoder (default)."),
    attn: Optional[str] = typer.Option(None, "--attn", help="Encoder-decoder: self or cross attention in the attention view (default: cross for the decoder)."),
    batch: bool = typer.Option(False, "--batch", help="Run several prompts as one padded batch."),
    attn_top: Optional[int] = typer.Option(None, "--attn-top", min=1, help="Attention as each query's K strongest keys instead of a grid (default: a grid, a window of it, or K keys, chosen by width)."),
    as_json: bool = typer.Option(False, "--json", help="Print the same content as JSON for programs (on long inputs the attention and mask grids hold a window of 64 positions per axis around --position, as the screen windows them; the pooled vectors whole)."),
    json_full: bool = typer.Option(False, "--json-full", help="With --json: every position of the attention and mask grids (they grow with the square of the input)."),
    export_html: Optional[Path] = typer.Option(None, "--export-html", help="Also write a self-contained HTML report of the chosen sections (every layer's attention as heatmaps, the lens over positions); opens offline."),
    save_logits: Optional[Path] = typer.Option(None, "--save-logits", metavar="DIR", help="Also write llama.cpp's model-conversion reference files into DIR: pytorch-MODEL.bin (the last position's float32 logits), .txt, -tokens.bin, -prompt.txt, as examples/model-conversion's run-org-model.py does, without torch."),
    allow_unused: bool = typer.Option(False, "--allow-unused", help="Run even when the checkpoint holds weights the config does not use (e.g. a classification head); they are listed as a warning."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="For a GGUF file: gguf (its own tokenizer, the default: what llama.cpp runs) or json (the tokenizer.json beside it: what transformers runs)."),
    allow_long: bool = typer.Option(False, "--allow-long", help=ALLOW_LONG_HELP),
    patch: Optional[List[str]] = typer.Option(None, "--patch", metavar="FILE:STEP[,STEP...]", help=PATCH_HELP),
    ablate: Optional[List[str]] = typer.Option(None, "--ablate", metavar="blocks.L.attn.head.H|blocks.L.mlp", help=ABLATE_HELP),
    check_batch: bool = typer.Option(False, "--check-batch", help="Also run the prompts as a batch padded left and right and each alone, and compare every row with its prompt alone step by step (tracer diff's rule): a verdict line per side naming the first step where padding leaks; exit 1 if it does. BERT/BART positions ignore padding: left padding differs by design (ML012) and is checked with positions from the mask instead."),
):
    from tracer.api import InputOptions, load_model
    from tracer.cli.prompts import batch_line, check_prompts
    from tracer.cli.default_model import default_model_path
    from tracer.report import RunOptions, build_report
    from tracer.report.options import resolve_sections

    if prompts and ids:
        raise TracerError("give prompt text or --ids, not both")
    if json_full and not as_json:
        raise TracerError("--json-full goes with --json")
    prompts = check_prompts(prompts, batch or check_batch)
    id_rows = [parse_int_list(s, "--ids") for s in ids] if ids else None
    if not prompts and not id_rows:
        raise TracerError("nothing to run: give a prompt or --ids", hint='tracer run "春天来"')
    folder = model if model is not None else default_model_path()
    check_outputs({"--save": save, "--export-html": export_html}, reading=checkpoint_files(folder))
    sections = resolve_sections(only, lens, values, steps_filter=bool(steps), cost=cost)
    m = load_model(folder, dtype=dtype, allow_unused=allow_unused, tokenizer=tokenizer)
    if m.unused_weights:
        warn_unused(m.unused_weights)
    refuse_headless(m.spec.head, target=target, top_k=top_k)
    top_k = DEFAULT_TOP_K if top_k is None else top_k
    target_id, target_note = resolve_target(target, m.tokenizer)
    from tracer.report.target import target_variants
    options = RunOptions(
        batch_row=batch_row, top_k=top_k, position=position, target_id=target_id, target_text=target,
        target_note=target_note, target_variants=target_variants(target, m.tokenizer), layer=layer, head=head, attn_top=attn_top, layers=parse_layers(layers, m.spec.n_layers),
        steps=tuple(steps or ()), all_steps=all_steps,
        sections=sections, stack=stack, attn=attn,
    )
    inputs = InputOptions(pad_side=pad_side, special_tokens=not no_special_tokens, pair=pair,
                          token_types=[parse_int_list(t, "--token-types") for t in token_types] if token_types else None,
                          **decoder_options(decoder_text, decoder_ids), positions=position_rule(positions),
                          allow_long=allow_long)
    read = MaskRead(mask, mask_convention, dtype) if mask is not None or mask_convention is not None else None
    from tracer.cli.run_patch import change_of, hook_options, render_change

    hooks = hook_options(patch, ablate)
    trace = m.run(text=prompts or None, ids=id_rows, keep=keep_globs(keep), options=inputs, mask=read,
                  clock=time.perf_counter if "cost" in options.sections else None, **hooks)
    base = m.run(text=prompts or None, ids=id_rows, keep=keep_globs(keep), options=inputs, mask=read) if hooks else None
    read = read.result if read is not None else None
    if check_batch:
        from tracer.cli.self_checks import batch_check

        checked = batch_check(m, prompts, id_rows, inputs, mask is not None)
    note_stored_not_used(trace, m)
    if m.spec.head == "none":
        from tracer.cli.sentence_limit import note_seq_length

        note_seq_length(trace, m.folder)
    report = build_report(trace, options, vocab=vocab_lookup(m.tokenizer), model=m)  # checks the options first
    change = change_of(base, trace, report, top_k, vocab_lookup(m.tokenizer)) if base is not None else None
    warn_nonfinite(report)
    console = make_console()
    if as_json:
        from tracer.cli.run_json import run_json

        data = run_json(report, trace, full=json_full)
        if read is not None:
            data["mask_input"] = read.to_json()
        if change is not None:
            data["intervention"] = change
        if check_batch:
            data["check_batch"] = checked.to_json()
        text = json.dumps(json_safe(data), ensure_ascii=False, indent=1, allow_nan=False) + "\n"
    else:
        text = rendered(console, lambda: (show_run(console, report, trace, read, pad_side),
                                          change is not None and console.print(render_change(change))))
        if check_batch:
            from tracer.cli.self_checks import batch_check_text

            text += batch_check_text(checked)
    write_run_outputs(save, export_html, trace, report, m, target_id, save_logits)  # all or none, after all went well
    console.file.write(text)
    if check_batch and not checked.passed:
        raise typer.Exit(1)


def show_run(console, report: dict, trace, read, pad_side: str) -> None:
    if trace.meta["reduced_to_stats"]:
        console.print(f"[dim]note: a long input: {', '.join(trace.meta['reduced_to_stats'])} kept as statistics only "
                      "to stay under 2 GiB (--keep '*' keeps everything)[/]")
    if trace.meta.get("computed_in_blocks"):
        from tracer.model.keep import blocked_note

        console.print(f"[dim]note: {blocked_note(trace.meta['computed_in_blocks'])}[/]")
    if report["batch_size"] > 1:
        from tracer.cli.prompts import batch_line

        console.print(f"[bold]{batch_line(report['batch_size'], pad_side)}[/]")
    if read is not None:
        show_mask_input(console, read, [t["token"] for t in report["tokens"]])
    show(console, report)


DEFAULT_TOP_K = 10


def note_stored_not_used(trace, m) -> None:
    """The card counts every stored parameter; name those the forward never reads (tracer cost leaves them out)."""
    from tracer.model.stored import stored_not_used

    found = stored_not_used(m.folder, m.config, m.spec.tied_embeddings, m.files)  # headers already read
    if found is not None:
        trace.meta["model"]["stored_not_used"] = found.to_json()


def refuse_headless(head: str, **given) -> None:
    """--target and --top-k ask about a token distribution; a model with no head (a pooled sentence encoder)
    gives none, so they are refused rather than ignored."""
    named = [f"--{k.replace('_', '-')}" for k, v in given.items() if v is not None]
    if head == "none" and named:
        raise TracerError(f"{' and '.join(named)}: this model has no head, so there is no token distribution to rank",
                          hint="its output is the pooled sentence vector (shown by default); drop " + " and ".join(named))


def write_run_outputs(save: Path | None, export_html: Path | None, trace, report: dict, model, target_id,
                      save_logits: Path | None = None) -> None:
    """--save, --export-html and --save-logits: staged together, so a failure leaves none."""
    from tracer.outputs import write_outputs

    files = {}
    logit_files = conversion_files(save_logits, trace, model) if save_logits is not None else {}
    for path, data in logit_files.items():
        files[path] = lambda out, data=data: out.write(data)
    if save is not None:
        files[save] = trace.writer()
    if export_html is not None:
        page = run_page_text(report, trace, model, vocab_lookup(model.tokenizer), target_id).encode("utf-8")
        files[export_html] = lambda out: out.write(page)
    if files:
        write_outputs(files)
    if save is not None:
        confirm_stderr(f"wrote the trace to {save} ({len(trace.names())} steps, {save.stat().st_size:,} bytes)")
    if export_html is not None:
        confirm_stderr(f"wrote the page to {export_html} ({export_html.stat().st_size:,} bytes)")
    if logit_files:
        first = next(iter(logit_files))
        confirm_stderr(f"wrote llama.cpp's model-conversion reference to {first} (and -tokens.bin, -prompt.txt, .txt)")


def conversion_files(folder: Path, trace, model) -> dict:
    """pytorch-MODEL.bin and its companions: the last real position's logits of the one prompt."""
    from tracer.capture.conversion_files import logits_file_set, prompt_logits
    from tracer.outputs import check_output

    if model.spec.head == "none":
        raise TracerError("--save-logits needs the logits: this model has no language-model head")
    try:
        real, last_logits = prompt_logits(trace)
    except TracerError as exc:
        raise TracerError(f"--save-logits: {exc.message}", hint=exc.hint) from None
    if folder.exists() and not folder.is_dir():
        raise TracerError(f"--save-logits {folder}: not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    name = Path(str(model.folder)).name
    name = name[: -len(".gguf")] if name.endswith(".gguf") else name
    prompts = trace.meta.get("prompts") or [None]
    files = logits_file_set(folder, name, last_logits, real, prompts[0])
    for path in files:
        check_output(path, "--save-logits")
    return files


def run_page_text(report: dict, trace, model, vocab, target_id: int | None = None) -> str:
    from tracer.html import run_page
    from tracer.report.collect import add_page_data

    return run_page(add_page_data(dict(report), trace, model, vocab, target_id))


def write_run_page(path: Path, report: dict, trace, model, vocab, target_id: int | None = None) -> None:
    """The HTML report of a run: the report's sections, every layer's attention, the lens over positions."""
    write_text(path, run_page_text(report, trace, model, vocab, target_id))
    confirm_stderr(f"wrote the page to {path} ({path.stat().st_size:,} bytes)")


def write_text(path: Path, text: str) -> None:
    """A text output, written atomically (checked, staged, fsynced, renamed)."""
    from tracer.outputs import check_output, write_output

    check_output(path, "output")
    data = text.encode("utf-8")
    write_output(path, lambda out: out.write(data))


def warn_nonfinite(report: dict) -> None:
    """Name the first step that produced NaN/Inf (on stderr, so it shows with --json too)."""
    from tracer.report.nonfinite import describe

    line = describe(report.get("nonfinite") or {})
    if line:
        make_console(stderr=True).print(f"warning: {line}", markup=False, soft_wrap=True)


def warn_unused(names) -> None:
    more = f" and {len(names) - 1} more" if len(names) > 1 else ""
    make_console(stderr=True).print(f"warning: {names[0]}{more} in the checkpoint not used (--allow-unused)",
                                    markup=False, soft_wrap=True)


def confirm_stderr(message: str) -> None:
    """A written-file confirmation that stays off a --json stdout."""
    from rich.markup import escape

    make_console(stderr=True).print(f"[dim]{escape(message)}[/]", soft_wrap=True)  # a path is never broken


def show(console, report: dict) -> None:
    """Print the chosen sections in story order, numbered as they appear."""
    from tracer.render.attention_view import render_attention
    from tracer.render.cost_view import render_measured
    from tracer.render.distribution_view import render_distribution, render_lens
    from tracer.render.model_card import render_model_card
    from tracer.render.routing_view import render_routing
    from tracer.render.shape_flow import render_shape_flow
    from tracer.render.tokens_view import render_tokens
    from tracer.render.values_view import render_values
    from tracer.render.pooled_view import render_pooled
    from tracer.render.theme import caution_lines

    labels = [t["token"] for t in report["tokens"]]
    if report.get("decoder_tokens") and (report.get("mask") or {}).get("stack") == "decoder":
        labels = [t["token"] for t in report["decoder_tokens"]]
    views = {
        "model": lambda n: render_model_card(report["model"], n, report.get("warnings")),
        "tokens": lambda n: render_tokens(report, n),
        "steps": lambda n: render_shape_flow(report, n),
        "values": lambda n: render_values(report["values"], n),
        "mask": lambda n: _masks(report, labels, n),
        "attention": lambda n: render_attention(report["attention"], n),
        "routing": lambda n: render_routing(report.get("routing"), n),
        "top_k": lambda n: render_distribution(report, n),
        "pooled": lambda n: render_pooled(report["pooled"], n),
        "lens": lambda n: render_lens(report["lens"], n),
        "cost": lambda n: render_measured(report["cost"], n),
    }
    if "model" not in report["sections"]:  # the card carries them; without it they come first
        for line in caution_lines(report.get("warnings")):
            console.print(line)
    for n, section in enumerate(report["sections"], start=1):
        if n > 1:
            console.print()
        console.print(views[section](n))


def _masks(report: dict, labels: list[str], n: int):
    """The self-attention mask; for an encoder-decoder decoder also the cross-attention mask."""
    from rich.console import Group

    from tracer.render.mask_panel import render_mask

    if "cross_mask" not in report:
        return render_mask(report["mask"], labels, n)
    keys = [t["token"] for t in report["tokens"]]  # two panels of one section: 4a self-attention, 4b cross-attention
    return Group(render_mask(report["mask"], labels, f"{n}a"), "",
                 render_mask(report["cross_mask"], labels, f"{n}b", key_labels=keys))


def position_rule(text: str | None) -> str:
    """--positions from-mask|index -> the engine's rule ("auto" when not given)."""
    if text is None:
        return "auto"
    rules = {"from-mask": "mask", "mask": "mask", "index": "index"}
    if text not in rules:
        raise TracerError(f"--positions must be from-mask or index, not {text!r}")
    return rules[text]


class MaskRead:
    """--mask in --mask-convention, read when Model.run knows the scores' shape [batch, heads, q, kv]
    (the batch is built once); `result` keeps the mask lab's explanation for the screen and --json."""

    def __init__(self, mask: str | None, convention: str | None, dtype: str):
        if mask is None or convention is None:
            raise TracerError("--mask and --mask-convention go together",
                              hint="e.g. --mask m.npy --mask-convention torch-sdpa-bool")
        self.mask, self.convention, self.dtype, self.result = mask, convention, dtype, None

    def __call__(self, score_shape: tuple[int, int, int, int]):
        from tracer.masks.conventions import canonical_mask

        self.result = canonical_mask(self.convention, self.mask, score_shape, score_dtype=self.dtype)
        return self.result


def decoder_options(texts: list[str] | None, id_texts: list[str] | None) -> dict:
    """--decoder-text / --decoder-ids: once for every row, or repeated for one decoder input per row."""
    out = {}
    if texts:
        out["decoder_text"] = texts[0] if len(texts) == 1 else tuple(texts)
    if id_texts:
        rows = [parse_int_list(t, "--decoder-ids") for t in id_texts]
        out["decoder_ids"] = rows[0] if len(rows) == 1 else rows
    return out


def show_mask_input(console, read, tokens: list[str]) -> None:
    """How tracer read --mask: the same explanation as `tracer mask`."""
    from rich.rule import Rule

    from tracer.render.mask_view import result_view

    console.print(Rule(f"[bold]0 · --mask, read as {read.convention}[/]", align="left"))
    console.print(result_view(read, tokens=tokens))
    console.print()


def resolve_target(target: str | None, tokenizer) -> tuple[int | None, str | None]:
    """--target TEXT -> (token id, note). `id:N` names an id directly; text is tokenized without specials."""
    if target is None:
        return None, None
    if target.startswith("id:"):
        found = parse_int_list(target[3:], "--target id")
        if len(found) != 1:
            raise TracerError(f"--target {target!r}: give one token id, e.g. id:42")
        return found[0], None
    if tokenizer is None:
        if target.strip().isdigit():
            return int(target), None
        raise TracerError("--target: this model has no tokenizer, so text cannot be turned into a token",
                          hint="give the token id, e.g. --target id:42")
    toks = tokenizer.encode(target, special_tokens=False)
    if not toks:
        raise TracerError(f"--target {target!r} gives no tokens")
    if len(toks) == 1:
        return toks[0].id, None
    from tracer.checkpoint.pieces import shown_piece

    pieces = " ".join(shown_piece(t.piece, t.bytes.hex(" "), t.special) for t in toks)
    return toks[0].id, f"{target!r} is {len(toks)} tokens ({pieces}); the rank shown is for the first, which comes next."


def parse_layers(text: str | None, n_layers: int) -> tuple[int, ...] | None:
    """'1,3' or '0-2' (or 'all') -> block indices, checked against the model."""
    if text is None:
        return None
    if text.strip() == "all":
        return tuple(range(n_layers))
    chosen: list[int] = []
    for part in split_list(text.replace(" - ", "-"), "--layers"):
        lo, sep, hi = part.partition("-") if not part.startswith("-") else (part, "", "")
        try:
            span = range(int(lo), int(hi) + 1) if sep else [int(lo)]
        except ValueError:
            raise TracerError(f"--layers: {part!r} is not a block number or range like 0-2") from None
        if not span:  # '3-1' named no block: an error, never an empty selection
            raise TracerError(f"--layers: the range {part!r} runs backwards", hint=f"write {hi}-{lo}")
        for i in span:
            j = i + n_layers if i < 0 else i
            if not 0 <= j < n_layers:
                raise TracerError(f"--layers: block {i} is out of range: the model has {n_layers} blocks (0..{n_layers - 1})")
            chosen.append(j)
    if not chosen:
        raise TracerError("--layers is empty")
    return tuple(sorted(set(chosen)))


def vocab_lookup(tokenizer):
    """id -> {piece, bytes, special}, from the tokenizer when there is one."""
    from tracer.report.options import ids_only_vocab

    return ids_only_vocab if tokenizer is None else tokenizer.describe_id
