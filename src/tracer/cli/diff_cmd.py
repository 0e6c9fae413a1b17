"""`tracer diff A B [TEXT]`: the first step where two runs disagree. Exit 0 match, 1 diverged, 2 error."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np
import typer

from tracer.cli.common import (
    check_outputs, checkpoint_files, handle_errors, make_console, parse_int_list, rendered, split_list,
)
from tracer.diff.compare import DEFAULT_ATOL, DEFAULT_RTOL
from tracer.errors import TracerError

DIFF_HELP = f"""Find the first step where two runs disagree.

A is the reference, B is checked against it. Each is a trace file (.safetensors, from tracer run --save, tracer capture, or your own PyTorch dump), a NumPy dump (.npy: one step named after the file; .npz: a step per key; never unpickled) a checkpoint folder or GGUF file (run on TEXT or --ids, or on the other file's input.ids; two models also get a weight diff), or, as B, a llama.cpp tensor log (llama-eval-callback, llama-debug --verbose: the printed edge values and sums are compared).

A step passes when every cell has |B - A| <= atol + rtol*|A| and NaN/inf sit in the same cells. The defaults (atol {DEFAULT_ATOL:g}, rtol {DEFAULT_RTOL:g}) suit float32 against float32. bf16: --atol 1e-1 --rtol 5e-2 and read NMSE and growth; fp16: --atol 3e-2 --rtol 1e-2; float64 against float64: --atol 1e-10 --rtol 1e-8.

Exit status: 0 within tolerance, 1 diverged, 2 error.

Examples:

# two trace files
tracer diff ref.safetensors mine.safetensors

# two checkpoint folders on one prompt (also diffs their weights)
tracer diff model-v1/ model-v2/ "春天来"

# a folder run on the input.ids of a port's dump
tracer diff model/ port-dump.safetensors

# a dump under transformers module names, or TransformerLens hook names
tracer diff ref.safetensors port-dump.safetensors --names hf
tracer diff ref.safetensors tl-cache.safetensors --names tl --json

# a port judged by the rules porting teams use (exit 1 when one fails)
tracer diff ref.safetensors port.safetensors --verdict nmse,kl

# llama.cpp's own tensors (llama-eval-callback or llama-debug --verbose output) against a run of the model
tracer diff model/ eval-callback.log "春天来"

# the error each block of a port adds on its own input
tracer diff --isolate model/ port.safetensors

# llama.cpp's model-conversion logits (llama-debug --save-logits) against the folder, NMSE band as the verdict
tracer diff model/ data/llamacpp-model.bin

# the same, and the error profile as an HTML page
tracer diff model-v1/ model-v2/ "春天来" --export-html diff.html
"""


def register(app: typer.Typer) -> None:
    app.command("diff", help=DIFF_HELP)(diff)


@handle_errors
def diff(
    a: Path = typer.Argument(..., metavar="A", help="Reference: a trace file (.safetensors, .npy, .npz) or a checkpoint folder.", show_default=False),
    b: Path = typer.Argument(..., metavar="B", help="Checked against A: a trace file (.safetensors, .npy, .npz) or a checkpoint folder.", show_default=False),
    text: Optional[str] = typer.Argument(None, metavar="TEXT", help="Prompt to run when A or B is a checkpoint folder.", show_default=False),
    ids: Optional[List[str]] = typer.Option(None, "--ids", help="Exact token ids for folders, comma separated; repeat for a batch."),
    names: str = typer.Option("identity", "--names", help="How B's tensor names map to step names: identity, hf (transformers module names), tl (TransformerLens hook names), llama.cpp (B is a llama-eval-callback / llama-debug log; recognised by content without it), or a JSON/TOML map file."),
    atol: float = typer.Option(DEFAULT_ATOL, "--atol", help="Absolute tolerance."),
    rtol: float = typer.Option(DEFAULT_RTOL, "--rtol", help="Tolerance relative to |A|."),
    steps: Optional[List[str]] = typer.Option(None, "--steps", help="Only steps matching this glob (repeatable), e.g. 'blocks.3.*'."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole diff as JSON (first_divergence, steps, blocks, ...)."),
    show_all: bool = typer.Option(False, "--all", help="Show every step in the table."),
    top_k: int = typer.Option(5, "--top-k", "--topk", help="k of the top-k overlap on logits and probs, and of the topk verdict."),
    dtype: str = typer.Option("float32", "--dtype", help="Compute dtype when running checkpoint folders: float32 or float64."),
    export_html: Optional[Path] = typer.Option(None, "--export-html", help="Also write a self-contained HTML page: the per-step error profile on a log scale with the first divergence marked, and the tables."),
    allow_unused: bool = typer.Option(False, "--allow-unused", help="Run checkpoint folders even when they hold weights the config does not use."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="For GGUF files: gguf (its own tokenizer, the default: what llama.cpp runs) or json (the tokenizer.json beside it: what transformers runs)."),
    allow_long: bool = typer.Option(False, "--allow-long", help="Run checkpoint folders past max_position_embeddings on rotary or relative positions (untrained there; a warning says so). Learned position tables are refused all the same."),
    verdict: Optional[List[str]] = typer.Option(None, "--verdict", metavar="NAME", help="Also judge by a rule porting teams use (repeatable): nmse (llama.cpp's bands on logits), layers (mlx-lm-tests' per-block max|Δ|/max|ref|), topk (vLLM: at the first different pick, each in the other's top-k; k from --top-k), kl (MaxText: max KL of the next-token distributions <= --max-kl), steps (tracer's atol/rtol rule). With any, the exit status is 1 when a given verdict fails, else 0."),
    max_kl: float = typer.Option(0.015, "--max-kl", help="The kl verdict's bound, in nats (MaxText's scripts use 0.015)."),
    isolate: bool = typer.Option(False, "--isolate", help="A is the reference model, B a port's trace with embed.out and every blocks.L.resid_post: rerun each block of A from B's input to it, and show the error each block adds alone against the accumulated one; the block adding the most is named (exit 1 when one is out of tolerance)."),
    same_ids: bool = typer.Option(False, "--same-ids", help="Two models and TEXT: run both on A's tokenization, to compare the computation alone (without it each side tokenizes TEXT itself, and different tokens are said first)."),
):
    from tracer.diff import aligned_pair, diff_traces, report_json
    from tracer.diff.inputs import input_difference, model_difference, models_line, prefix_trace
    from tracer.numbers import json_safe
    from tracer.diff.verdicts import dtype_flags, verdicts
    from tracer.render.verdicts_view import dtype_flags_view, verdicts_view
    from tracer.diff.generation import generation_summary
    from tracer.render.diff_view import DiffScreen

    if atol < 0 or rtol < 0:
        raise TracerError("--atol and --rtol must be >= 0")
    if top_k < 1:
        raise TracerError("--top-k must be at least 1")
    id_rows = [parse_int_list(s, "--ids") for s in ids] if ids else None
    if text is not None and id_rows:
        raise TracerError("give TEXT or --ids, not both")
    if same_ids and text is None:
        raise TracerError("--same-ids says whose tokenization of TEXT both models run on: give TEXT",
                          hint=f'tracer diff {a} {b} "春天来" --same-ids')
    if isolate:
        from tracer.cli.diff_isolate import refuse_with_isolate, run_isolate

        refuse_with_isolate({"--verdict": verdict, "--same-ids": same_ids, "--export-html": export_html,
                             "--steps": steps, "--all": show_all})
        run_isolate(a, b, text, id_rows, names, atol, rtol, dtype, as_json, allow_unused, allow_long)
    from tracer.capture.conversion_files import is_logits_file
    from tracer.cli.diff_llamacpp import diff_log, is_log

    if is_logits_file(b):  # llama.cpp's model-conversion set: llamacpp-MODEL.bin (+ -tokens.bin)
        from tracer.cli.diff_logits import diff_logits

        return diff_logits(a, b, text, id_rows, dtype, top_k, as_json, tokenizer)
    log_side = b if is_log(b, names) else a if names == "identity" and is_log(a, names) else None
    if log_side is not None:  # a llama.cpp dump is always the checked side
        ref = a if log_side is b else b
        return diff_log(ref, log_side, text, id_rows, dtype, atol, rtol, as_json, show_all, allow_unused, allow_long,
                        tokenizer)
    step_globs = tuple(g for s in steps for g in split_list(s, "--steps")) if steps else None
    reading = [a, b, *checkpoint_files(a), *checkpoint_files(b)]
    check_outputs({"--export-html": export_html}, reading=reading)
    with np.errstate(over="ignore", invalid="ignore"):  # statistics of dtype-minimum masks overflow float32 sums
        sides = load_sides(a, b, text, id_rows, dtype, allow_unused, allow_long, same_ids, tokenizer)
        ref, mine = sides.ref, sides.mine
        inputs = input_difference(ref, mine, str(a), str(b), refuse=sides.models is None)  # traces: raises
        if inputs is not None and inputs["compared_positions"] == 0:  # two models tokenized TEXT apart
            return tokens_apart(inputs, a, b, as_json)
        if inputs is not None:
            ref, mine = prefix_trace(ref, inputs["compared_positions"]), prefix_trace(mine, inputs["compared_positions"])
        report = diff_traces(ref, mine, names=names, atol=atol, rtol=rtol, steps=step_globs, top_k=top_k,
                             ref_label=str(a), mine_label=str(b))
    if inputs is not None:
        report.extras["inputs"] = inputs
    models = model_difference(sides.ref, sides.mine)
    if models is not None and models["differs"] == ["config_sha256"] and sides.converted:
        models = None  # a GGUF's config is rebuilt from its metadata: same sizes, another hash, the same model
    if models is not None:  # said first: a diff of two different models is not a port's error
        report.extras["models"] = models
        report.notes.insert(0, models_line(models, str(a), str(b)))
    if not report.compared and not report.diverged:
        raise nothing_compared(sides.ref, sides.mine, names)
    if sides.models is not None:
        add_folder_extras(report, sides, a, b)
    warnings = side_warnings(sides.ref.meta, sides.mine.meta)
    if warnings:
        report.extras["warnings"] = warnings
    generation = generation_summary(report, sides.ref.meta, sides.mine.meta)
    if generation is not None:
        report.extras["generation"] = generation
    ref_t, mine_t = aligned_pair(ref, mine, names)[:2]  # as compared: under tracer's names
    conversion = conversion_verdict(report, ref_t, mine_t) if sides.converted else None
    if conversion is not None:
        report.extras["conversion"] = conversion
    judged = verdicts(_split(verdict), ref_t, mine_t, report, top_k, max_kl) if verdict else None
    flags = dtype_flags(ref_t, mine_t)
    if flags:
        report.extras["dtypes"] = flags
    console = make_console()
    if as_json:
        payload = report_json(report)
        if judged is not None:
            payload["verdicts"] = [v.to_dict() for v in judged]
        text = json.dumps(json_safe(payload), ensure_ascii=False, indent=1, allow_nan=False) + "\n"
    else:
        def screen() -> None:
            console.print(DiffScreen(report, show_all=show_all))
            if flags:
                console.print(dtype_flags_view(flags))
            if judged is not None:
                console.print(verdicts_view(judged))

        text = rendered(console, screen)
    if export_html is not None:  # after the screen is made: a failure leaves no file
        from tracer.cli.run_cmd import confirm_stderr, write_text
        from tracer.html import diff_page

        write_text(export_html, diff_page(report_json(report)))
        confirm_stderr(f"wrote the page to {export_html} ({export_html.stat().st_size:,} bytes)")
    console.file.write(text)
    if judged is not None:
        raise typer.Exit(0 if all(v.passed for v in judged) else 1)
    if conversion is not None and inputs is None and (conversion["quantized"] or conversion["faults"]):
        # a quantized conversion is judged by its verdict: exact equality is not expected of it
        raise typer.Exit(0 if conversion["passed"] else 1)
    raise typer.Exit(1 if report.diverged or inputs is not None else 0)


def tokens_apart(inputs: dict, a: Path, b: Path, as_json: bool) -> None:
    """The verdict of two models whose tokenizations of TEXT share nothing comparable: the tokens, exit 1."""
    from tracer.render.diff_view import tokens_view

    console = make_console()
    if as_json:
        from tracer.numbers import json_safe

        text = json.dumps(json_safe({"verdict": "inputs differ", "inputs": inputs, "first_divergence": None}),
                          ensure_ascii=False, indent=1, allow_nan=False) + "\n"
    else:
        text = rendered(console, lambda: console.print(tokens_view(inputs, str(a), str(b))))
    console.file.write(text)
    raise typer.Exit(1)


def _split(values: list[str]) -> list[str]:
    return [n.strip() for v in values for n in v.split(",") if n.strip()]


@dataclass
class Sides:
    ref: object  # Trace
    mine: object  # Trace
    models: tuple | None = None  # (model_a, model_b) when both are checkpoint folders

    @property
    def converted(self) -> bool:
        """Two models, one of them a GGUF file: a conversion, whose weights are judged as quantization."""
        return self.models is not None and any(_is_gguf_model(m) for m in self.models)


def load_sides(a: Path, b: Path, text: str | None, id_rows: list[list[int]] | None, dtype: str,
               allow_unused: bool = False, allow_long: bool = False, same_ids: bool = False,
               tokenizer: str | None = None) -> Sides:
    """Both sides as Traces; folders are run on the same input (TEXT, --ids, or the other side's input.ids).
    same_ids: two models run on A's tokenization of TEXT (the computation alone, whatever B's tokenizer says)."""
    from tracer.diff.files import load_side

    for p in (a, b):
        if not p.exists():
            raise TracerError(f"{p}: no such file or folder")
    if _is_model(a) and _is_model(b):
        if text is None and not id_rows:
            raise TracerError("two checkpoint folders need an input", hint=f'tracer diff {a} {b} "春天来" (or --ids 5,17,42)')
        model_a, model_b = _load(a, dtype, allow_unused, tokenizer), _load(b, dtype, allow_unused, tokenizer)
        ref = _run(model_a, text, id_rows, allow_long=allow_long)
        pad_side = "right"
        if text is not None and (same_ids or model_b.tokenizer is None):  # B runs on A's ids
            (id_rows, pad_side), text = _input_of(ref), None
        return Sides(ref, _run(model_b, text, id_rows, pad_side, allow_long), (model_a, model_b))
    if same_ids:
        raise TracerError("--same-ids goes with two models (checkpoint folders or GGUF files): a trace's ids are fixed")
    if _is_model(a) or _is_model(b):
        folder, file = (a, b) if _is_model(a) else (b, a)
        trace = load_side(file)
        pad_side = "right"
        if text is None and not id_rows:
            taken = _input_of(trace)
            if taken is None:
                raise TracerError(f"{file} has no input.ids to run {folder} on", hint="give TEXT or --ids")
            id_rows, pad_side = taken
        ran = _run(_load(folder, dtype, allow_unused, tokenizer), text, id_rows, pad_side, allow_long)
        return Sides(ran, trace) if _is_model(a) else Sides(trace, ran)
    if text is not None or id_rows:
        raise TracerError("TEXT and --ids are for checkpoint folders; both A and B are trace files")
    return Sides(load_side(a), load_side(b))


def _is_model(p: Path) -> bool:
    """A checkpoint folder, or a GGUF file (a model, not a trace)."""
    from tracer.model.gguf_open import is_gguf

    return p.is_dir() or is_gguf(p)


def _load(folder: Path, dtype: str, allow_unused: bool = False, tokenizer: str | None = None):
    """A model; --tokenizer chooses for GGUF files only (a folder in the pair keeps its tokenizer.json)."""
    from tracer.api import load_model
    from tracer.model.gguf_open import is_gguf

    return load_model(folder, dtype=dtype, allow_unused=allow_unused, tokenizer=tokenizer if is_gguf(folder) else None)


def _run(model, text, id_rows, pad_side: str = "right", allow_long: bool = False):
    if text is not None:
        return model.run(text=text, allow_long=allow_long)
    return model.run(ids=id_rows, pad_side=pad_side, allow_long=allow_long)


def side_warnings(ref_meta: dict, mine_meta: dict) -> list[dict]:
    """What each side's run recorded (e.g. positions past max_position_embeddings), marked with its side."""
    from tracer.report import run_warnings

    return [{**w, "side": side} for side, meta in (("reference", ref_meta), ("mine", mine_meta))
            for w in run_warnings(meta)]


def _input_of(trace, prefix: str = "input.") -> tuple[list[list[int]], str] | None:
    """A trace's real token ids per row (padding dropped) and its padding side; None without input.ids.
    prefix "input.decoder_": an encoder-decoder's decoder input."""
    if prefix + "ids" not in trace or trace.step(prefix + "ids").array is None:
        return None
    ids = trace[prefix + "ids"]
    has_mask = prefix + "mask" in trace and trace.step(prefix + "mask").array is not None
    mask = trace[prefix + "mask"] if has_mask else None
    if mask is None or mask.all():
        return [[int(i) for i in row] for row in ids], "right"
    side = "left" if (mask[:, 0] == 0).any() else "right"
    return [[int(i) for i, keep in zip(row, keeps) if keep] for row, keeps in zip(ids, mask)], side


def nothing_compared(ref, mine, names: str) -> TracerError:
    ref_names, mine_names = ref.names()[:3], mine.names()[:3]
    return TracerError(
        f"no step has a tensor on both sides (A: {', '.join(ref_names) or 'nothing'} ...; B: {', '.join(mine_names) or 'nothing'} ...)",
        hint="pick the name map that fits B: --names hf (transformers modules), tl (TransformerLens hooks), or a map file"
        if names == "identity" else "check the map, and that the tensors were kept (tracer run --keep)",
    )


def add_folder_extras(report, sides: Sides, a: Path, b: Path) -> None:
    """Two folders: the weight diff and the tokens whose final probability moved most."""
    from dataclasses import asdict

    from tracer.diff.distribution import moved_tokens
    from tracer.diff.weights import diff_weights

    spec = sides.models[0].spec
    heads = tuple(sorted({spec.n_heads, getattr(spec, "n_kv_heads", None) or spec.n_heads})) if sides.converted else None
    w = diff_weights(a, b, sides.models[0].files, sides.models[1].files, judge_heads=heads)
    report.extras["weights"] = {  # plain numbers for the screen; report_json makes them JSON-safe
        "tensors": [dict(asdict(t), layer=t.layer) for t in w.tensors],
        "layers": [asdict(layer) for layer in w.layers],
    }
    tokenizer = sides.models[1].tokenizer or sides.models[0].tokenizer
    piece = shown_piece_of(tokenizer) if tokenizer else None
    moved = moved_tokens(sides.ref, sides.mine, piece=piece)
    if moved:
        report.extras["moved_tokens"] = moved
    if piece is not None:  # name the tokens in the per-position distribution diff too
        for step in report.steps:
            for p in (step.distribution or {}).get("per_position", []):
                p["top1_ref_piece"], p["top1_mine_piece"] = piece(p["top1_ref"]), piece(p["top1_mine"])


def _is_gguf_model(model) -> bool:
    return hasattr(model.files, "gguf")


def conversion_verdict(report, ref_t, mine_t) -> dict | None:
    """A GGUF against its folder: each weight quantization error or a fault, and the logits' NMSE band."""
    from tracer.diff.quantization import QuantJudgement, overall
    from tracer.diff.verdicts import nmse_verdict

    tensors = (report.extras.get("weights") or {}).get("tensors") or []
    judged = [QuantJudgement(**{k: v for k, v in t["quant"].items() if k != "max_abs"}) for t in tensors if t.get("quant")]
    if not judged and not any(t["status"] == "same" for t in tensors):
        return None
    try:
        nv = nmse_verdict(ref_t, mine_t)
        nmse, band = nv.data["nmse"], nv.level
    except Exception:  # no logits on both sides (an encoder's pooled output only): the weights alone
        nmse = band = None
    from tracer.names.hf import hf_source

    family = sides_family(ref_t)
    names = [step.name for step in ref_t.steps]
    readers: dict[str, str] = {}  # module -> the step its output is (a module's input is followed by its output)
    for i, name in enumerate(names):
        source = hf_source(family, name) if family else None
        if source is None or source[0] in readers:
            continue
        module, take = source
        readers[module] = name if take == "output" else (names[i + 1] if i + 1 < len(names) else name)

    def first_step_of(weight: str) -> str | None:
        module = weight.rsplit(".", 1)[0]
        while module:
            if module in readers:
                return readers[module]
            module = module.rsplit(".", 1)[0] if "." in module else ""
        return None

    return overall(judged, nmse, band, first_step_of)


def sides_family(trace) -> str | None:
    model = trace.meta.get("model") or {}
    return model.get("family") or (model.get("spec") or {}).get("family")


def shown_piece_of(tokenizer):
    """id -> the piece as `tracer run` shows it: decoded bytes (游, not the byte-level 'æ¸¸'), ␣ for a space."""
    from tracer.checkpoint.pieces import shown_piece

    def piece(token_id: int) -> str:
        d = tokenizer.describe_id(int(token_id))
        return shown_piece(d["piece"], d.get("bytes", ""), d.get("special", False))

    return piece
