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
             atol: float, rtol: float, as_json: bool, show_all: bool, allow_unused: bool, allow_long: bool) -> None:
    from tracer.capture.llamacpp import read_log
    from tracer.capture.llamacpp_compare import judge_log
    from tracer.cli.common import make_console, rendered
    from tracer.names.ggml import GGML_STEPS
    from tracer.numbers import json_safe
    from tracer.render.llamacpp_view import log_view

    if not log_path.is_file():
        raise TracerError(f"{log_path}: no such file")
    log = read_log(log_path)
    ids, family, steps = _reference(ref, log, text, id_rows, dtype, allow_unused, allow_long)
    if family not in GGML_STEPS:
        raise TracerError(f"llama.cpp's graph names are mapped for {', '.join(sorted(GGML_STEPS))}; not yet for "
                          f"{family or 'this model'}", hint="tracer steps shows tracer's names to map by hand")
    console = make_console()
    if log.token_ids and ids is not None and list(ids) != list(log.token_ids):
        _inputs_differ(console, ids, log.token_ids, ref, log_path, as_json)
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


def _reference(ref: Path, log, text, id_rows, dtype, allow_unused, allow_long):
    """(the ids REF ran, its family, step name -> kept array, batch of 1)."""
    from tracer.api import load_model
    from tracer.diff.files import load_side
    from tracer.model.gguf_open import is_gguf

    if ref.is_dir() or is_gguf(ref):
        model = load_model(ref, dtype=dtype, allow_unused=allow_unused)
        if text is not None:
            trace = model.run(text=text, allow_long=allow_long)
        else:
            rows = id_rows or ([list(log.token_ids)] if log.token_ids else None)
            if rows is None:
                raise TracerError(f"{ref} needs an input: the log prints no token ids",
                                  hint=f'tracer diff {ref} LOG "the prompt llama.cpp ran" (or --ids)')
            trace = model.run(ids=rows, allow_long=allow_long)
        family = model.spec.family
    else:
        if text is not None or id_rows:
            raise TracerError("TEXT and --ids are for a model; the reference is a trace file")
        trace = load_side(ref)
        family = (trace.meta.get("model") or {}).get("family") or ((trace.meta.get("model") or {}).get("spec") or {}).get("family")
    ids = None
    if "input.ids" in trace and trace.step("input.ids").kept:
        arr = trace["input.ids"]
        if arr.ndim == 2 and arr.shape[0] != 1:
            raise TracerError(f"{ref}: a batch of {arr.shape[0]}; a llama.cpp log holds one prompt")
        ids = [int(i) for i in arr.reshape(-1)]
    steps = {n: trace[n] for n in trace.names() if trace.step(n).kept and n != "input.ids"}
    return ids, family, steps


def _inputs_differ(console, ids, log_ids, ref, log_path, as_json) -> None:
    first = next((i for i, (a, b) in enumerate(zip(ids, log_ids)) if a != b), min(len(ids), len(log_ids)))
    if as_json:
        console.file.write(json.dumps({"verdict": "inputs differ", "ref_ids": ids, "llamacpp_ids": log_ids,
                                       "first_difference": first}) + "\n")
    else:
        console.print(f"the inputs differ: {ref} ran {len(ids)} tokens {ids[:16]}, llama.cpp ran {len(log_ids)} "
                      f"{log_ids[:16]}; first different at position {first}", style="bold red", markup=False)
        console.print("  run both on one tokenization: tracer diff MODEL LOG --ids <the log's ids>", style="dim")
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
