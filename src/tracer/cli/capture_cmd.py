"""`tracer capture`: record transformers' own eager forward under tracer's step names (needs torch + transformers)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import List, Optional

import typer

from tracer.cli.common import (
    check_outputs, checkpoint_files, handle_errors, keep_globs, make_console, parse_int_list,
)
from tracer.errors import TracerError

CAPTURE_HELP = """Run a checkpoint folder in transformers (eager attention, float32) and save a trace under tracer's step names.

The trace is the trusted reference for tracer diff. Needs the optional extra, installed from the tracer checkout: pip install -e '.\\[torch]' (the PyPI project named tracer is another one).

Examples:

tracer capture model/ "春天来" -o hf.safetensors
tracer capture model/ --ids 5,17,42 -o hf.safetensors

# an encoder-decoder, with the decoder's input ids
tracer capture t5/ "The cat sleeps." --decoder-ids 0,5,7 -o hf.safetensors

# then check tracer against it
tracer diff hf.safetensors model/

# an ONNX export (either torch exporter), its values named after the folder's modules
tracer capture model.onnx --model model/ "春天来" -o onnx.safetensors

# optimum's split encoder-decoder: the encoder graph finds decoder_model.onnx next to it
tracer capture t5-onnx/encoder_model.onnx --model t5/ "Hi" -o onnx.safetensors

# or an export folder (model.onnx, decoder_model.onnx or decoder_model_merged.onnx)
tracer capture t5-onnx/ --model t5/ "The cat sleeps." -o onnx.safetensors
"""

INSTALL_HINT = "pip install -e '.[torch]' from the tracer checkout (torch==2.13.0, transformers==5.24.0; 'tracer' on PyPI is another project)"


def register(app: typer.Typer) -> None:
    app.command("capture", help=CAPTURE_HELP)(capture)


@handle_errors
def capture(
    model_dir: Path = typer.Argument(..., metavar="MODEL_DIR", help="Checkpoint folder (config.json, *.safetensors, tokenizer.json), or an .onnx export or export folder (with --model).", show_default=False),
    prompts: Optional[List[str]] = typer.Argument(None, metavar="TEXT", help="Prompt text (quote it); several prompts form a padded batch with --batch, or when any of them contains a space.", show_default=False),
    ids: Optional[List[str]] = typer.Option(None, "--ids", help="Exact token ids, comma separated; repeat for a batch."),
    output: Path = typer.Option(..., "--output", "-o", help="Trace file to write (.safetensors).", show_default=False),
    dtype: str = typer.Option("float32", "--dtype", help="float32 or float64."),
    keep: Optional[List[str]] = typer.Option(None, "--keep", help="Glob of steps whose tensors are kept (repeatable). Default: all."),
    pad_side: str = typer.Option("right", "--pad-side", help="Where a batch is padded: left or right."),
    no_special_tokens: bool = typer.Option(False, "--no-special-tokens", help="Do not add BOS/EOS/CLS."),
    decoder_ids: Optional[List[str]] = typer.Option(None, "--decoder-ids", help="Encoder-decoder only: decoder input ids, comma separated: once for every row, or repeated for one row per prompt (padded as the prompts are). Default: the decoder start token."),
    token_types: Optional[List[str]] = typer.Option(None, "--token-types", help="BERT/RoBERTa only: token type ids, comma separated; repeat for a batch. Default: zeros."),
    batch: bool = typer.Option(False, "--batch", help="Run several prompts as one padded batch (as tracer run)."),
    allow_long: bool = typer.Option(False, "--allow-long", help="Capture past max_position_embeddings on rotary or relative positions (as tracer run --allow-long; the trace records the warning). Learned position tables are refused all the same."),
    model: Optional[Path] = typer.Option(None, "--model", metavar="DIR", help="With an .onnx file or export folder: the checkpoint folder it was exported from (its config, tokenizer and module names)."),
):
    from tracer.cli.prompts import check_prompts

    from tracer.cli.capture_onnx import is_onnx_folder

    if model_dir.suffix == ".onnx" or model is not None or is_onnx_folder(model_dir):
        from tracer.cli.capture_onnx import capture_onnx_cmd

        return capture_onnx_cmd(model_dir, model, check_prompts(prompts, batch), ids, output, pad_side, decoder_ids)

    if prompts and ids:
        raise TracerError("give prompt text or --ids, not both")
    prompts = check_prompts(prompts, batch)
    if not prompts and not ids:
        raise TracerError("nothing to run: give a prompt or --ids", hint=f'tracer capture {model_dir} "春天来" -o hf.safetensors')
    if not (model_dir / "config.json").is_file():
        raise TracerError(f"{model_dir}: not a checkpoint folder (no config.json)")
    id_rows = [parse_int_list(s, "--ids") for s in ids] if ids else None
    decoder_rows = [parse_int_list(s, "--decoder-ids") for s in decoder_ids] if decoder_ids else None
    type_rows = [parse_int_list(s, "--token-types") for s in token_types] if token_types else None
    check_outputs({"--output": output}, reading=checkpoint_files(model_dir))
    inputs = batch_inputs(model_dir, prompts, id_rows, pad_side, not no_special_tokens)
    decoder = decoder_inputs(model_dir, decoder_rows, len(inputs.ids), pad_side) if decoder_rows else None
    warnings = length_warnings(model_dir, inputs.ids.shape[1], decoder.ids.shape[1] if decoder else 1, allow_long,
                               bool(prompts), len(inputs.ids))
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:  # after the input checks, so a wrong command line is told first
        raise TracerError(f"tracer capture needs torch and transformers ({' and '.join(missing)} not installed)", hint=INSTALL_HINT)

    from tracer.capture.hf import capture as hf_capture
    from tracer.capture.hf_routes import ROUTED

    from tracer.model.open import open_config

    routed = open_config(model_dir).config.get("model_type") in ROUTED
    batch = len(inputs.ids)
    if type_rows is not None and len(type_rows) != batch:
        raise TracerError(f"--token-types gives {len(type_rows)} rows for {batch} prompts")
    trace = hf_capture(
        model_dir, inputs.ids.tolist(), attention_mask=inputs.attention_mask.tolist(),
        position_ids=None if routed else inputs.positions.tolist(),  # encoders, encoder-decoders: as transformers derives them
        dtype=dtype, keep=keep_globs(keep) or ("*",),
        token_type_ids=_pad_like(type_rows, inputs) if type_rows else None,
        decoder_ids=decoder.ids.tolist() if decoder else None,
        decoder_attention_mask=decoder.attention_mask.tolist() if decoder and not decoder.attention_mask.all() else None,
    )  # fmt: skip
    if prompts:
        trace.meta["prompts"] = list(prompts)
    if warnings:
        trace.meta["warnings"] = warnings
    trace.save(output)
    kept = sum(1 for s in trace.steps if s.kept)
    make_console().print(f"wrote {len(trace.steps)} steps ({kept} tensors) to {output}", markup=False)


def batch_inputs(model_dir: Path, prompts, id_rows, pad_side: str, special_tokens: bool):
    """The same padded ids, mask and positions tracer's own run would use, with only the tokenizer loaded."""
    from tracer.model.inputs import pad_rows, rows_from_ids, rows_from_text
    from tracer.model.open import open_config

    tokenizer = _tokenizer(model_dir)
    config = open_config(model_dir).config
    vocab = _vocab(config)
    if prompts:
        rows, _ = rows_from_text(list(prompts), tokenizer, special_tokens)
    else:
        rows = rows_from_ids(id_rows, tokenizer, vocab)
    inputs, _ = pad_rows(rows, _pad_id(config, vocab), pad_side)
    return inputs


def decoder_inputs(model_dir: Path, rows: list[list[int]], n_rows: int, pad_side: str):
    """--decoder-ids: one row for every prompt, or one per prompt; ragged rows padded as the prompts are."""
    from tracer.model.inputs import pad_rows, rows_from_ids
    from tracer.model.open import open_config

    if len(rows) == 1:
        rows = rows * n_rows
    elif len(rows) != n_rows:
        raise TracerError(f"--decoder-ids gives {len(rows)} decoder row(s) for {n_rows} prompt(s)",
                          hint="give --decoder-ids once for every row, or once per prompt")
    config = open_config(model_dir).config
    vocab = _vocab(config)
    checked = rows_from_ids(rows, _tokenizer(model_dir), vocab)
    side = pad_side if len({len(r) for r in rows}) > 1 else "right"
    inputs, _ = pad_rows(checked, _pad_id(config, vocab), side)
    return inputs


def _tokenizer(model_dir: Path):
    from tracer.checkpoint.tokenizer import Tokenizer

    tok_path = model_dir / "tokenizer.json"
    return Tokenizer(tok_path) if tok_path.is_file() else None


def _vocab(config: dict) -> int:
    return int(config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size") or 2**62)


def _pad_id(config: dict, vocab: int) -> int:
    pad = config.get("pad_token_id")
    return pad if isinstance(pad, int) and 0 <= pad < vocab else 0


def length_warnings(model_dir: Path, width: int, decoder_len: int, allow_long: bool, text: bool,
                    n_rows: int) -> list[dict]:
    """tracer run's length rule (see tracer.model.inputs), before transformers runs: a learned position table
    ends at its last row; rotary and relative positions go further with --allow-long and a warning."""
    from tracer.model.inputs import check_positions, input_words, stack_limit
    from tracer.model.open import checkpoint_spec, open_config

    what = input_words(text, n_rows)
    cc = open_config(model_dir)
    cfg = cc.config
    try:
        spec = checkpoint_spec(cc)  # the one config -> Spec (pooling included), as tracer run builds it
    except TracerError:
        return []  # a family tracer does not run: transformers alone decides what fits
    if spec.route != "encoder-decoder":
        found = [check_positions(width, stack_limit(spec, cfg, model_dir), allow_long, what)]
    else:
        found = [check_positions(width, stack_limit(spec, cfg, model_dir, "encoder"), allow_long, what),
                 check_positions(decoder_len, stack_limit(spec, cfg, model_dir, "decoder"), allow_long, "the decoder input")]
    return [w for w in found if w]


def _pad_like(rows: list[list[int]], inputs) -> list[list[int]]:
    """Token type rows placed where the padded batch has its real tokens (pads get type 0)."""
    out = []
    for row, mask in zip(rows, inputs.attention_mask.tolist()):
        if len(row) != sum(mask):
            raise TracerError(f"--token-types has {len(row)} ids for a prompt of {sum(mask)} tokens")
        it = iter(row)
        out.append([next(it) if m else 0 for m in mask])
    return out
