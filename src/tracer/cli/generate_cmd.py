"""`tracer generate`: decode new tokens one at a time with a KV cache, and show the cache at work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from tracer.cli.common import (
    check_outputs, checkpoint_files, handle_errors, keep_globs, make_console, parse_int_list, rendered,
)
from tracer.errors import TracerError
from tracer.numbers import json_safe


def register(app: typer.Typer) -> None:
    app.command("generate", help=GENERATE_HELP, no_args_is_help=False)(generate)


GENERATE_HELP = """Generate new tokens one at a time, reusing every earlier key and value from a KV cache.

Sections: prefill (the prompt in one pass, folded), decoding (one row per new token), KV cache (one layer's cache growing, what the mask blocks, bytes), text.

Examples:

# the shipped model continues its corpus
tracer generate "春天来" --max-new-tokens 8

# cached logits against the whole sequence recomputed
tracer generate "春天来" --check-cache

# the prompt prefilled 2 tokens at a time equals the whole prefill
tracer generate "春天来" --check-chunked 2

# a left-padded batch: each row stops on its own
tracer generate "春天来" "夏天" -n 12

# sampling, reproducible
tracer generate "春" --temperature 0.8 --top-p 0.9 --seed 1

# exact ids, a trace of every step, JSON
tracer generate -m DIR --ids 5,17,42 --ignore-eos --save g.safetensors --json

# the generation as an interactive page: the KV cache growing, each new query row against it
tracer generate "春天来" -n 6 --check-cache --export-html g.html

# past the shipped model's 128 positions (rotary: allowed, with a warning)
tracer generate "$(cat story.txt)" -n 40 --allow-long
"""


@handle_errors
def generate(
    prompts: Optional[List[str]] = typer.Argument(None, help="Prompt text; several prompts form a left-padded batch."),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Checkpoint folder (a decoder or encoder-decoder model). Default: the shipped model."),
    ids: Optional[List[str]] = typer.Option(None, "--ids", help="Exact prompt token ids, comma separated; repeat for a batch."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="For a GGUF file: gguf (its own tokenizer, the default: what llama.cpp runs) or json (the tokenizer.json beside it: what transformers runs)."),
    max_new_tokens: int = typer.Option(8, "--max-new-tokens", "-n", help="How many tokens to generate at most (per row)."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Sample at this temperature (0 = greedy, the default)."),
    top_k: Optional[int] = typer.Option(None, "--top-k", help="Sample from the k most likely tokens only."),
    top_p: Optional[float] = typer.Option(None, "--top-p", help="Sample from the smallest set of tokens whose probability reaches p, in (0, 1]."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the sampler (NumPy's Generator): the same seed gives the same tokens."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Do not stop at the model's end-of-sequence tokens."),
    stop: Optional[List[str]] = typer.Option(None, "--stop", help="Stop a row once its new text contains this (repeatable)."),
    check_cache: bool = typer.Option(False, "--check-cache", help="At every step also recompute the whole sequence without a cache and show the largest logit difference."),
    check_chunked: Optional[int] = typer.Option(None, "--check-chunked", help="Also prefill the prompt N tokens at a time through the KV cache and compare every position's logits and every layer's cached keys and values with the whole prefill: a verdict line (bound as --check-cache's); exit 1 beyond it."),
    layer: Optional[int] = typer.Option(None, "--layer", help="Layer the cache panel shows (default: the first with a sliding window, else 0; negative counts back)."),
    batch_row: Optional[int] = typer.Option(None, "--batch-row", help="Only this row in the cache panel (default: every row; negative counts back)."),
    dtype: str = typer.Option("float32", "--dtype", help="Compute dtype: float32 or float64."),
    no_special_tokens: bool = typer.Option(False, "--no-special-tokens", help="Do not add BOS (the tokenizer's post-processor)."),
    save: Optional[Path] = typer.Option(None, "--save", "-o", help="Write a trace: the prefill under the usual names, step t under decode.{t}."),
    keep: Optional[List[str]] = typer.Option(None, "--keep", help="With --save: glob of steps kept whole (repeatable; applies to every step t too). Default: all under 2 GiB."),
    export_html: Optional[Path] = typer.Option(None, "--export-html", help="Also write the interactive HTML page of the generation: the KV cache as a strip growing a column per step, each new query row against it, the --check-cache result (as tracer report of the saved trace)."),
    cost: bool = typer.Option(False, "--cost", help="Add what each pass costs: FLOPs with the cache and without it, beside the measured time."),
    as_json: bool = typer.Option(False, "--json", help="Print rows, new ids, text, stop reason, steps and warnings as JSON."),
    allow_long: bool = typer.Option(False, "--allow-long", help="Let a rotary or relative-position model run past max_position_embeddings (prompt + new tokens), where it was not trained; a warning names the step that crossed it. Learned position tables are refused all the same."),
):
    from tracer.api import load_model
    from tracer.cli.default_model import default_model_path
    from tracer.model.generate import GenerateOptions, generate as run_generation
    from tracer.model.sampling import sampling_from_flags
    from tracer.report.nonfinite import generation_nonfinite

    if prompts and ids:
        raise TracerError("give prompt text or --ids, not both")
    id_rows = [parse_int_list(s, "--ids") for s in ids] if ids else None
    if not prompts and not id_rows:
        raise TracerError("nothing to generate from: give a prompt or --ids", hint='tracer generate "春天来"')
    if max_new_tokens < 1:
        raise TracerError(f"--max-new-tokens must be at least 1, not {max_new_tokens}")
    sampling = sampling_from_flags(temperature, top_k, top_p, seed)
    if keep and save is None:
        raise TracerError("--keep chooses what --save writes; give --save FILE too")
    if stop is not None and any(not s for s in stop):
        raise TracerError("--stop is empty")
    folder = model if model is not None else default_model_path()
    check_outputs({"--save": save, "--export-html": export_html}, reading=checkpoint_files(folder))
    m = load_model(folder, dtype=dtype, tokenizer=tokenizer)
    if batch_row is not None:
        n_rows = len(prompts or id_rows)
        row = batch_row + n_rows if batch_row < 0 else batch_row  # negative counts back, as every index option
        if not 0 <= row < n_rows:
            raise TracerError(f"--batch-row {batch_row} is out of range: the batch has {n_rows} row(s) "
                              f"(0..{n_rows - 1}, or -{n_rows}..-1 from the end)")
        batch_row = row
    options = GenerateOptions(max_new_tokens, sampling, ignore_eos, tuple(stop or ()), check_cache,
                              record=save is not None or export_html is not None, keep=keep_globs(keep, decoding=max_new_tokens > 0), panel_layer=layer,
                              special_tokens=not no_special_tokens, allow_long=allow_long)
    gen = run_generation(m, prompts or None, id_rows, options)
    chunked = None
    if check_chunked is not None:
        from tracer.cli.self_checks import chunked_check

        chunked = chunked_check(m, prompts, id_rows, check_chunked, not no_special_tokens, allow_long)
    nonfinite = generation_nonfinite(gen)
    if nonfinite is not None:  # on the screen with the other warnings, in --json, and on stderr (as tracer run)
        gen.warnings.append(nonfinite)
        if as_json:
            make_console(stderr=True).print(f"warning: {nonfinite['message']}", markup=False, soft_wrap=True)
    costs = step_costs(m, gen) if cost else None
    console = make_console()
    if as_json:
        data = gen.to_json()
        if costs is not None:
            data["cost"] = costs
        if chunked is not None:
            data["check_chunked"] = chunked.to_json()
        text = json.dumps(json_safe(data), ensure_ascii=False, indent=1, allow_nan=False) + "\n"
    else:
        text = rendered(console, lambda: show(console, m, gen, dtype, batch_row, costs))
        if chunked is not None:
            from tracer.cli.self_checks import chunked_check_text

            text += chunked_check_text(chunked)
    if save is not None or export_html is not None:  # after the screen is made: a failure leaves no file
        write_generation_outputs(save, export_html, m, gen)
    console.file.write(text)
    if chunked is not None and not chunked.passed:
        raise typer.Exit(1)


def write_generation_outputs(save: Path | None, export_html: Path | None, m, gen) -> None:
    """--save and --export-html of a generation, staged together (both files or neither), as tracer run's."""
    from tracer.cli.run_cmd import DEFAULT_TOP_K, vocab_lookup, write_run_outputs
    from tracer.report import RunOptions, build_report
    from tracer.report.options import DEFAULT_SECTIONS

    report = None
    if export_html is not None:
        lens = ("lens",) if m.spec.head == "lm" else ()
        options = RunOptions(top_k=DEFAULT_TOP_K, sections=DEFAULT_SECTIONS + lens)
        report = build_report(gen.trace, options, vocab=vocab_lookup(m.tokenizer), model=m)
    write_run_outputs(save, export_html, gen.trace, report, m, None)


def step_costs(m, gen) -> list[dict]:
    """FLOPs of every pass of this generation (prefill, then each step) beside its measured time."""
    from tracer.cost.generation import generation_costs

    enc_len = max(len(r.prompt_ids) for r in gen.rows)
    itemsize = 8 if m.dtype == "float64" else 4
    steps = [(s.t, s.cache_before, s.cache_after, s.seconds) for s in gen.steps]
    return generation_costs(m.spec, steps, len(gen.rows), enc_len, itemsize)


def show(console, m, gen, dtype: str, batch_row: int | None, costs: list[dict] | None = None) -> None:
    from tracer.render.generate_view import render_cache, render_cost, render_prefill, render_steps, render_text

    spec = m.spec
    line = (f"{m.folder.name}: {m.family}, {spec.route_text}, {spec.n_layers} layers, {spec.n_heads} heads "
            f"({spec.n_kv_heads} kv), d_head {spec.d_head}, {dtype}")
    vocab = m.tokenizer.describe_id if m.tokenizer else None  # tokens as tracer run shows them
    views = [lambda k: render_prefill(gen, line, k), lambda k: render_steps(gen, k, console.width, vocab),
             lambda k: render_cache(gen, k, batch_row), lambda k: render_text(gen, dtype, k, vocab)]
    if costs is not None:
        views.insert(3, lambda k: render_cost(costs, k))
    for n, view in enumerate(views, start=1):
        if n > 1:
            console.print()
        console.print(view(n))
    if gen.trace is not None and gen.trace.meta["reduced_to_stats"]:
        console.print(f"[dim]note: a long generation: {', '.join(gen.trace.meta['reduced_to_stats'])} kept as statistics "
                      "only to stay under 2 GiB (--keep '*' keeps everything)[/]")
