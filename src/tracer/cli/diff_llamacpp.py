"""`tracer diff REF LOG`: REF (a trace, or a model run on the log's tokens) against a llama.cpp tensor dump.

LOG is what `llama-eval-callback` or `llama-debug --verbose` printed, recognised by its content (or forced with
`--names llama.cpp`). Only what the log holds is compared: each tensor's edge values and its sum.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tracer.errors import TracerError

LOG_NAMES = ("llama.cpp", "llamacpp", "ggml")
_TRACE_SUFFIXES = (".safetensors", ".npy", ".npz", ".gguf")


def is_log(path: Path, names: str) -> bool:
    """A llama.cpp log: forced by --names llama.cpp, else a text file (not a trace or model) that reads as one."""
    from tracer.capture.llamacpp import is_llamacpp_log

    if names in LOG_NAMES:
        return True
    if not path.is_file() or path.suffix.lower() in _TRACE_SUFFIXES:
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError:
        return False
    return is_llamacpp_log(head.decode("utf-8", errors="replace"))


def diff_log(ref: Path, log_path: Path, text: str | None, id_rows: list[list[int]] | None, dtype: str,
             atol: float, rtol: float, as_json: bool, show_all: bool, allow_unused: bool, allow_long: bool,
             tokenizer: str | None = None) -> None:
    from tracer.capture.llamacpp import read_log
    from tracer.capture.llamacpp_compare import judge_log
    from tracer.cli.common import make_console, rendered
    from tracer.names.ggml import GGML_STEPS
    from tracer.numbers import json_safe
    from tracer.render.llamacpp_view import log_view

    if not log_path.is_file():
        raise TracerError(f"{log_path}: no such file")
    log = read_log(log_path)
    ids, family, steps = _reference(ref, log, text, id_rows, dtype, allow_unused, allow_long, tokenizer)
    if family not in GGML_STEPS:
        raise TracerError(f"llama.cpp's graph names are mapped for {', '.join(sorted(GGML_STEPS))}; not yet for "
                          f"{family or 'this model'}", hint="tracer steps shows tracer's names to map by hand")
    console = make_console()
    if log.token_ids and ids is not None and list(ids) != list(log.token_ids):
        ids_apart(console, str(ref), ids, "llama.cpp ran", log.token_ids, as_json,
                  "run both on one tokenization: tracer diff MODEL LOG --ids <the log's ids>")
    judged = judge_log(log, steps, family, atol, rtol)
    if not judged.judged:
        raise TracerError(f"{log_path}: none of its {judged.printed} printed nodes matches a step kept in {ref}",
                          hint="keep every step (tracer run --keep '*' --save) or give the model itself")
    if as_json:
        out = json.dumps(json_safe(_as_dict(judged, log, log_path)), indent=1, allow_nan=False) + "\n"
    else:
        out = rendered(console, lambda: (console.print(log_view(judged, str(log_path), show_all)),
                                         _cut_note(console, log)))
    console.file.write(out)
    raise typer.Exit(0 if judged.passed else 1)


def reference_trace(ref: Path, text, id_rows, their_ids: list[int], dtype: str, tokenizer: str | None = None,
                    allow_unused: bool = False, allow_long: bool = False):
    """REF as a trace: a model (folder or GGUF) run on TEXT, --ids or the other side's own ids, else a trace file.
    Returns (trace, family)."""
    from tracer.api import load_model
    from tracer.diff.files import load_side
    from tracer.model.gguf_open import is_gguf

    if ref.is_dir() or is_gguf(ref):
        model = load_model(ref, dtype=dtype, allow_unused=allow_unused, tokenizer=tokenizer if is_gguf(ref) else None)
        if text is not None:
            return model.run(text=text, allow_long=allow_long), model.spec.family
        rows = id_rows or ([list(their_ids)] if their_ids else None)
        if rows is None:
            raise TracerError(f"{ref} needs an input: the other side prints no token ids",
                              hint=f'tracer diff {ref} B "the prompt llama.cpp ran" (or --ids)')
        return model.run(ids=rows, allow_long=allow_long), model.spec.family
    if text is not None or id_rows:
        raise TracerError("TEXT and --ids are for a model; the reference is a trace file")
    trace = load_side(ref)
    model = trace.meta.get("model") or {}
    return trace, model.get("family") or (model.get("spec") or {}).get("family")


def _reference(ref: Path, log, text, id_rows, dtype, allow_unused, allow_long, tokenizer):
    """(the ids REF ran, its family, step name -> kept array, batch of 1)."""
    trace, family = reference_trace(ref, text, id_rows, log.token_ids, dtype, tokenizer, allow_unused, allow_long)
    ids = None
    if "input.ids" in trace and trace.step("input.ids").kept:
        arr = trace["input.ids"]
        if arr.ndim == 2 and arr.shape[0] != 1:
            raise TracerError(f"{ref}: a batch of {arr.shape[0]}; a llama.cpp log holds one prompt")
        ids = [int(i) for i in arr.reshape(-1)]
    steps = {n: trace[n] for n in trace.names() if trace.step(n).kept and n != "input.ids"}
    return ids, family, steps


def ids_apart(console, ref_label: str, ids: list[int], other_label: str, other_ids: list[int], as_json: bool,
              hint: str) -> None:
    """REF ran other tokens than the llama.cpp side holds: said first, exit 1."""
    from tracer.diff.inputs import shared_prefix

    first = shared_prefix([ids], [other_ids])
    if as_json:
        console.file.write(json.dumps({"verdict": "inputs differ", "ref_ids": ids, "other_ids": other_ids,
                                       "first_difference": first}) + "\n")
    else:
        console.print(f"the inputs differ: {ref_label} ran {len(ids)} tokens {ids[:16]}, {other_label} "
                      f"{len(other_ids)} {other_ids[:16]}; first different at position {first}",
                      style="bold red", markup=False)
        console.print(f"  {hint}", style="dim", markup=False)
    raise typer.Exit(1)


def _cut_note(console, log) -> None:
    if log.cut_at is not None:
        console.print(f"note: the log ends mid-tensor at line {log.cut_at} (llama-eval-callback's logger is not "
                      "flushed at exit); the tensors before it were compared", style="yellow", markup=False)


def _as_dict(j, log, log_path) -> dict:
    first = j.first_divergence
    return {
        "log": str(log_path), "printed": j.printed, "compared": len(j.judged), "unmapped": j.unmapped,
        "flash_attention": j.flash_attention, "cut_at": log.cut_at,
        "verdict": "match" if first is None else "diverged",
        "first_divergence": None if first is None else first.comparison.step,
        "nodes": [{"step": r.comparison.step, "ggml_name": r.comparison.ggml_name, "op": r.comparison.op,
                   "line": r.comparison.line, "values": r.comparison.compared, "max_abs": r.comparison.max_abs,
                   "max_ref": r.comparison.max_ref, "tolerance": r.tolerance, "sum_llamacpp": r.comparison.sum_llamacpp,
                   "sum_tracer": r.comparison.sum_tracer, "rows": r.comparison.rows, "ok": r.ok} for r in j.judged],
    }
