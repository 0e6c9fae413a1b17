"""`tracer capture MODEL.onnx --model DIR`: an ONNX export's values under tracer's step names."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text

from tracer.cli.common import check_outputs, checkpoint_files, make_console, parse_int_list
from tracer.errors import TracerError

_SHOWN = 6


def is_onnx_folder(path: Path) -> bool:
    """An export folder (optimum writes *.onnx beside config.json and the tokenizer), not a checkpoint."""
    return path.is_dir() and any(path.glob("*.onnx")) and not any(path.glob("*.safetensors"))


def capture_onnx_cmd(path: Path, model: Path | None, prompts: list[str] | None, ids: list[str] | None,
                     output: Path, pad_side: str, decoder_ids: list[str] | None = None) -> None:
    from tracer.capture.onnx import graphs_for, onnx_trace, require_onnx

    if path.suffix != ".onnx" and not path.is_dir():
        raise TracerError(f"--model goes with an .onnx file or an export folder; {path} is neither",
                          hint="tracer capture model.onnx --model model/ TEXT -o out.safetensors")
    if model is None:
        raise TracerError(f"{path}: an ONNX export needs --model DIR, the folder it was exported from",
                          hint="its config, tokenizer and module names name the graph's values")
    if prompts and ids:
        raise TracerError("give prompt text or --ids, not both")
    if not prompts and not ids:
        raise TracerError("nothing to run: give a prompt or --ids", hint=f'tracer capture {path} --model {model} "春天来" -o onnx.safetensors')
    if not path.exists():
        raise TracerError(f"{path}: no such ONNX file")
    require_onnx()
    id_rows = [parse_int_list(s, "--ids") for s in ids] if ids else None
    decoder_rows = [parse_int_list(s, "--decoder-ids") for s in decoder_ids] if decoder_ids else None
    graphs = graphs_for(path)  # a missing graph is told before anything runs
    check_outputs({"--output": output}, reading=[*graphs.paths, *checkpoint_files(model)])
    result = onnx_trace(path, model, text=prompts, ids=id_rows, pad_side=pad_side, decoder_ids=decoder_rows)
    result.trace.save(output)
    console = make_console()
    if graphs.found:
        console.print(Text(graphs.found, style="dim"))
    for said in result.scopes:
        console.print(Text(said, style="dim"))
    named = len(result.trace.steps)
    console.print(Text(f"wrote {named} steps to {output} ({result.exporter} export)"))
    if result.missing:
        shown = ", ".join(result.missing[:_SHOWN]) + (f" and {len(result.missing) - _SHOWN} more" if len(result.missing) > _SHOWN else "")
        console.print(Text(f"not in the export as a module's value: {shown} (computed inside a module or a fused "
                           "kernel; tracer diff compares the rest)", style="dim"))
