"""The Python API: load a checkpoint folder, run text or ids, get a Trace; generate, diff, cost.

    import tracer
    model = tracer.load_model("fixtures/models/llama")
    trace = model.run("春天来")                      # or ids=[5, 17, 42], ids=[[5, 17, 42], [7, 8]]
    trace["logits"].shape                            # (1, pos, vocab)
    trace.save("out.safetensors")
    model.generate("春天来", max_new_tokens=8).rows[0].text
    tracer.diff_runs(trace, "other.safetensors").first_divergence
    tracer.cost_of("fixtures/models/llama", tokens=[128, 4096])["parameters"]

Each is a thin layer over what the command runs (tracer run, generate, diff, cost); errors are TracerError.
(diff_runs and cost_of, not diff and cost: tracer.diff and tracer.cost are the subpackages.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tracer.diff.compare import DEFAULT_ATOL, DEFAULT_RTOL, DiffReport
from tracer.engine.forward import MaskOverride
from tracer.errors import TracerError
from tracer.model.generate import Generation
from tracer.model.model import Model, load_model
from tracer.model.options import InputOptions
from tracer.trace import Trace

__all__ = ["DiffReport", "Generation", "InputOptions", "MaskOverride", "Model", "Trace", "cost_of", "diff_runs", "load_model"]


def diff_runs(a: "Trace | Model | str | Path", b: "Trace | Model | str | Path", text: str | Sequence[str] | None = None,
         ids: Sequence[Sequence[int]] | Sequence[int] | None = None, *, names: str = "identity",
         atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL, steps: Sequence[str] | None = None, top_k: int = 5,
         dtype: str = "float32", allow_long: bool = False) -> DiffReport:
    """The first step where two runs disagree: what `tracer diff A B` computes.

    a is the reference, b is checked against it. Each is a Trace, a trace file (.safetensors), a Model or a
    checkpoint folder; a model runs on text / ids, or on the other side's input.ids. A step passes when
    every cell has |b - a| <= atol + rtol*|a|. names: how b's tensor names map to step names ("identity",
    "hf", "tl" or a map file). Returns a DiffReport: .diverged, .first_divergence, .steps, .blocks,
    .extras["inputs"] when the two inputs differ (then only their shared prefix is compared)."""
    from tracer.diff import diff_traces
    from tracer.diff.inputs import input_difference, prefix_trace

    if atol < 0 or rtol < 0:
        raise TracerError("`atol` and `rtol` must be >= 0")
    ref, mine = _opened(a, dtype), _opened(b, dtype)
    if isinstance(ref, Model) and isinstance(mine, Model) and text is None and ids is None:
        raise TracerError("two models need an input: give `text` or `ids`")
    if isinstance(ref, Model):
        ref = _run_side(ref, text, ids, mine, allow_long)
    if isinstance(mine, Model):
        mine = _run_side(mine, text, ids, ref, allow_long)
    inputs = input_difference(ref, mine, _label(a, "a"), _label(b, "b"))
    if inputs is not None:
        ref, mine = prefix_trace(ref, inputs["compared_positions"]), prefix_trace(mine, inputs["compared_positions"])
    report = diff_traces(ref, mine, names=names, atol=atol, rtol=rtol, steps=tuple(steps) if steps else None,
                         top_k=top_k, ref_label=_label(a, "a"), mine_label=_label(b, "b"))
    if inputs is not None:
        report.extras["inputs"] = inputs
    if not report.compared and not report.diverged:
        raise TracerError("no step has a tensor on both sides",
                          hint="pick the name map that fits b (`names`: hf, tl or a map file), and keep the tensors")
    return report


def cost_of(model: "Model | str | Path", tokens: Sequence[int] = (128, 1024, 8192), batch: int = 1,
         dtype: str = "float32") -> dict:
    """What a forward pass and a decoding step cost, counted from the config alone: what `tracer cost` shows.

    model: a Model, a checkpoint folder or its config.json. tokens: sequence lengths (the per-step table
    uses the first). dtype: bytes per number (float32, float64, bfloat16, float16). Returns the JSON form
    of `tracer cost --json`: parameters, steps, prefill and decoding, KV cache, crossover, growth."""
    from tracer.cost.summary import DTYPE_BYTES, cost_report
    from tracer.model.open import checkpoint_spec, open_config

    lengths = [int(n) for n in tokens]
    if not lengths or any(n < 1 for n in lengths):
        raise TracerError(f"`tokens` must be positive lengths, got {list(tokens)}")
    if batch < 1:
        raise TracerError(f"`batch` must be at least 1, got {batch}")
    if dtype not in DTYPE_BYTES:
        raise TracerError(f"`dtype` {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    from tracer.model.stored import stored_not_used

    if isinstance(model, Model):
        spec, name, folder, cfg, files = model.spec, model.folder.name, model.folder, model.config, model.files
    else:
        cc = open_config(model)
        spec, name = checkpoint_spec(cc), cc.name
        folder, cfg, files = Path(model), cc.config, None
    not_used = stored_not_used(folder, cfg, spec.tied_embeddings, files) if folder.is_dir() else None
    extra = {"stored_not_used": not_used.to_json()} if not_used is not None else {}
    return {"model_name": name, **cost_report(spec, lengths, batch, dtype), **extra}


def _opened(side, dtype: str):
    if isinstance(side, (Trace, Model)):
        return side
    path = Path(side)
    if path.is_dir():
        return load_model(path, dtype=dtype)
    if not path.exists():
        raise TracerError(f"{path}: no such file or folder")
    return Trace.load(path)


def _run_side(model: Model, text, ids, other, allow_long: bool) -> Trace:
    if text is not None or ids is not None:
        return model.run(text, ids, allow_long=allow_long)
    from tracer.diff.inputs import left_padded, real_ids

    taken = real_ids(other) if isinstance(other, Trace) else None
    if taken is None:
        raise TracerError("the other side has no input.ids to run the model on", hint="give `text` or `ids`")
    return model.run(ids=taken, pad_side="left" if left_padded(other) else "right", allow_long=allow_long)


def _label(side, default: str) -> str:
    if isinstance(side, Model):
        return str(side.folder)
    if isinstance(side, Trace):
        return side.meta.get("source") or (side.meta.get("model") or {}).get("name") or default
    return str(side)
