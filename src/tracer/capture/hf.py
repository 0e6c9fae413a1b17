"""Reference activations from transformers' eager forward pass, under tracer's step names and layouts.

One forward pass is watched two ways: forward hooks on the modules named in
`tracer.names.hf`, and transformers' own outputs (`hidden_states`,
`attentions`, `logits`). The trace takes the outputs where they exist and the
hooks elsewhere; `run_forward` returns both so a test can check they agree.
Encoder-only and encoder-decoder families (inputs, outputs, `pooled`) are in
`tracer.capture.hf_routes`.

torch and transformers are imported inside functions: importing this module
costs nothing, and using it without them raises a TracerError.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Sequence

import numpy as np

from tracer.names.hf import (CONDITIONS, FUSED_QKV, HEADS_FIRST, HF_NAMES, LAYER_CONDITIONS, _template_of, hf_module,
                             hf_source, names_in_order)
from tracer.capture import hf_routes
from tracer.capture.float64 import default_dtype, float32_as_float64, needs_float64_default, recompute_rotary_in_float64
from tracer.capture.meta import describe_tokens, file_sha256
from tracer.errors import TracerError
from tracer.engine.masks import positions_from_mask
from tracer.trace import Recorder, Trace

FAMILIES = tuple(HF_NAMES)
DTYPES = ("float32", "float64")
_INSTALL_HINT = ("tracer capture needs torch and transformers: pip install -e '.[torch]' from the tracer checkout "
                 "('tracer' on PyPI is another project)")


def require_torch():
    """(torch, transformers), or a TracerError saying how to install them."""
    try:
        import torch
        import transformers
    except ImportError:
        raise TracerError(_INSTALL_HINT) from None
    return torch, transformers


def capture(
    model_dir: str | Path,
    ids: list[list[int]],
    attention_mask: list[list[int]] | None = None,
    position_ids: list[list[int]] | None = None,
    dtype: str = "float32",
    keep: Sequence[str] = ("*",),
    widen_float32: bool = True,
    *,
    token_type_ids: list[list[int]] | None = None,
    decoder_ids: list[list[int]] | None = None,
    decoder_attention_mask: list[list[int]] | None = None,
) -> Trace:
    """Run transformers' eager forward on `ids` and record it as a tracer Trace.

    Position ids follow tracer's convention (cumsum(mask) - 1, pads 0) unless
    given; OPT derives its own from the mask, and input.positions records what
    it used (cumsum(mask) * mask - 1, before its +2 offset). Encoders and
    encoder-decoders use positions as transformers derives them (bert and bart
    0..n-1, roberta from the non-pad ids; t5 none) and record them the same way.

    token_type_ids: bert/roberta segment ids (zeros when not given).
    decoder_ids / decoder_attention_mask: the decoder input of t5/bart (default:
    the decoder start token alone in every row; mask all ones).

    widen_float32: in a float64 run, also widen what transformers computes in
    float32 on purpose: RMSNorm (`.to(torch.float32)`), the eager softmax
    (`dtype=torch.float32`) and the rotary embedding (inv_freq, angles, cos,
    sin). Stock transformers keeps those in float32 even in float64, which moves
    activations by about 1e-7 and logits by about 1e-6 and would hide
    rounding-level differences. False keeps the stock behaviour. No effect in float32.
    """
    torch, transformers = require_torch()
    model_dir = Path(model_dir)
    model, family = load_model(model_dir, dtype)
    widen = dtype == "float64" and widen_float32
    if widen:
        recompute_rotary_in_float64(model)
    ids_np, mask_np = _check_inputs(ids, attention_mask, model.config.vocab_size)
    headless = hf_routes.is_headless(model, family)
    if family in hf_routes.ROUTED:
        kwargs, inputs = hf_routes.route_inputs(
            family, model.config, ids_np, mask_np, position_ids, token_type_ids, decoder_ids, decoder_attention_mask
        )
        positions_np = None
    else:
        if token_type_ids is not None or decoder_ids is not None or decoder_attention_mask is not None:
            raise TracerError(f"{family} is decoder-only: token types and decoder ids do not apply")
        positions_np = _positions_for(family, mask_np, position_ids)
        kwargs = None
        inputs = [("input.ids", ids_np, "input"), ("input.mask", mask_np, "input")]
        inputs.append(("input.positions", positions_np, _positions_op(family, position_ids)))
    with torch.inference_mode():
        from_hooks, from_outputs = run_forward(
            model, family, ids_np, mask_np, positions_np, widen_float32=widen, inputs=kwargs,
            pooling=hf_routes.read_pooling(model_dir) if headless else None,
        )  # fmt: skip

    recorder = Recorder(keep=keep, hf_module=lambda name: hf_module(family, name, headless))
    for name, value, op in inputs:
        recorder(name, value, hf_routes.step_axes(name), op)
    for name in step_order(family, model.config, headless):
        if name in from_outputs:
            value, op = from_outputs[name]
        elif name in from_hooks:
            value, op = from_hooks[name]
        else:
            continue
        recorder(name, value, hf_routes.step_axes(name), op)
    config_sha256 = file_sha256(model_dir / "config.json")
    meta = {
        "model": {"name": model_dir.resolve().name, "family": family, "config_sha256": config_sha256},
        "source": f"transformers {transformers.__version__} eager",
        "torch": torch.__version__,
        "dtype": dtype,
    }
    if widen:
        meta["notes"] = ["float64 throughout: transformers' explicit float32 casts (RMSNorm, softmax, rotary) widened"]
        if family == "t5":  # its bucket formula calls .float() too; widening does not move a bucket in these configs
            meta["notes"].append("t5 relative-position buckets computed through the widened log (float64)")
    elif dtype == "float64":
        meta["notes"] = ["stock transformers float64: RMSNorm, eager softmax and rotary still computed in float32"]
    tokens = describe_tokens(model_dir, ids_np, mask_np)
    if tokens is not None:
        meta["tokens"] = tokens
    decoder = {name: value for name, value, _ in inputs if name in ("input.decoder_ids", "input.decoder_mask")}
    if decoder and tokens is not None:
        meta["decoder_tokens"] = describe_tokens(model_dir, decoder["input.decoder_ids"], decoder["input.decoder_mask"])
    return Trace(recorder.steps, meta)


# ---------- loading and inputs ----------


def load_model(model_dir: Path, dtype: str):
    """(model, family) with eager attention, in float32 or float64 (bf16/fp16 weights are widened exactly)."""
    torch, transformers = require_torch()
    if dtype not in DTYPES:
        raise TracerError(f"capture dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if not (model_dir / "config.json").is_file():
        raise TracerError(f"{model_dir}: no config.json here", hint="pass a checkpoint folder")
    try:
        config = transformers.AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
        auto = hf_routes.auto_class(transformers, config)
        model = auto.from_pretrained(model_dir, attn_implementation="eager", dtype=getattr(torch, dtype),
                                     use_safetensors=True, trust_remote_code=False,
                                     **_eager_experts(config))  # never unpickle, never run its code
    except (OSError, ValueError, KeyError) as e:
        raise TracerError(f"{model_dir}: transformers could not load it: {e}") from None
    model.eval()
    family = model.config.model_type
    if family not in FAMILIES:
        raise TracerError(f"capture does not know family {family!r}", hint=f"known: {', '.join(FAMILIES)}")
    return model, family


def _eager_experts(config) -> dict:
    """MoE models: the per-expert loop (transformers' eager experts), not grouped_mm, which has no float64."""
    moe = any(getattr(config, k, None) for k in ("num_local_experts", "num_experts"))
    return {"experts_implementation": "eager"} if moe else {}


def _check_inputs(ids, attention_mask, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    if not ids or not ids[0] or len({len(row) for row in ids}) != 1:
        raise TracerError("ids must be a non-empty rectangular list of rows (pad them and pass attention_mask)")
    ids_np = np.asarray(ids, dtype=np.int64)  # [batch, pos]
    if ids_np.min() < 0 or ids_np.max() >= vocab_size:
        raise TracerError(f"token ids must lie in [0, {vocab_size}), got {ids_np.min()}..{ids_np.max()}")
    mask_np = np.ones_like(ids_np) if attention_mask is None else np.asarray(attention_mask, dtype=np.int64)
    if mask_np.shape != ids_np.shape:
        raise TracerError(f"attention_mask shape {mask_np.shape} differs from ids shape {ids_np.shape}")
    return ids_np, mask_np


def opt_positions(mask: np.ndarray) -> np.ndarray:
    """What OPT computes from the mask before adding its offset of 2 (pads come out as -1)."""
    return (np.cumsum(mask, axis=1) * mask - 1).astype(np.int64)


def _positions_for(family: str, mask: np.ndarray, position_ids) -> np.ndarray:
    if position_ids is not None:
        positions = np.asarray(position_ids, dtype=np.int64)
        if positions.shape != mask.shape:
            raise TracerError(f"position_ids shape {positions.shape} differs from ids shape {mask.shape}")
        return positions
    return opt_positions(mask) if family == "opt" else positions_from_mask(mask)


def _positions_op(family: str, position_ids) -> str:
    if position_ids is not None:
        return "input"
    return "hf:opt cumsum(mask)*mask-1" if family == "opt" else "cumsum(mask)-1, pads 0"


# ---------- the forward pass, seen through hooks and through outputs ----------


def step_order(family: str, config, headless: bool = False) -> list[str]:
    """Concrete step names in execution order, after the input.* steps (probs, computed from logits, last).

    Stacks follow the table's order for this config (names_in_order): each run of `blocks.{i}.*` templates (or
    `encoder.blocks.{i}.*`, `decoder.blocks.{i}.*`) repeats once per block.
    A headless encoder has no head steps and ends in `pooled`.
    """
    order: list[str] = []
    block: list[str] = []
    stack = ""
    for template in list(names_in_order(family, config)) + [""]:
        head = template.split("blocks.{i}.")[0] if "blocks.{i}." in template else None
        if block and head != stack:  # a run of block templates ended: expand it
            for i in range(hf_routes.n_layers(config, stack)):  # qwen2/3_moe: router or dense MLP per layer
                order += [t.format(i=i) for t in block if _in_layer(family, t, config, i)]
            block = []
        if head is not None:
            stack = head
            if _condition_holds(family, template, config):
                block.append(template)
        elif template and hf_source(family, template, headless) is not None and _condition_holds(family, template, config):
            order.append(template)
    if "logits.raw" in order and "logits" not in order:  # gemma2: capped logits come from the outputs only
        order.append("logits")
    return order + (["pooled"] if headless else ["probs"])


def _in_layer(family: str, template: str, config, layer: int) -> bool:
    condition = LAYER_CONDITIONS.get((family, template))
    return condition is None or condition(config, layer)


def _condition_holds(family: str, template: str, config) -> bool:
    condition = CONDITIONS.get((family, template))
    if callable(condition):  # a predicate on the config (opt-350m's projections)
        return bool(condition(config))
    return condition is None or getattr(config, condition[0], None) == condition[1]


def run_forward(model, family: str, ids, mask, positions, widen_float32: bool = False, inputs=None, pooling=None):
    """One eager forward; returns (from_hooks, from_outputs), each {step name: (array, op)}.

    widen_float32 runs it under `float32_as_float64` (see `capture`). inputs:
    the forward's keyword arguments for an encoder / encoder-decoder family
    (`hf_routes.route_inputs`; default: its own defaults for ids and mask);
    pooling: (mode, normalize) of a headless encoder (default: mean, no normalisation).

    from_outputs holds what transformers returns itself: embed.out and the
    resid_post of all but the last block (`hidden_states`), final_norm.out (its
    last hidden state), attn.weights (`attentions`), logits and probs.
    """
    import torch

    config = model.config
    headless = hf_routes.is_headless(model, family)
    records, handles = _install_hooks(model, family, config, headless)
    if family in hf_routes.ROUTED:
        if inputs is None:
            inputs, _ = hf_routes.route_inputs(family, config, ids, mask, None, None, None, None)
        kwargs = dict(inputs)
    else:
        kwargs = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        if family != "opt" or not np.array_equal(positions, opt_positions(mask)):
            kwargs["position_ids"] = torch.from_numpy(positions)
    if not headless:
        kwargs["use_cache"] = False
    try:
        with contextlib.ExitStack() as modes:
            if widen_float32:
                modes.enter_context(float32_as_float64())
                if needs_float64_default(model):  # a dynamic rope recomputes from the length in the forward
                    modes.enter_context(default_dtype(torch.float64))
            out = model(**kwargs, output_hidden_states=True, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()

    from_hooks = {}
    for name in step_order(family, config, headless):
        if name in ("probs", "pooled") or hf_source(family, name, headless) is None:  # gemma2's capped logits
            continue
        module, take = hf_source(family, name, headless)
        value = _take(records[module], take)
        if value is None:
            continue
        if family == "bart" and name == "logits":  # BartForConditionalGeneration adds it after lm_head
            value = value + model.final_logits_bias
        array = _to_layout(value, name, take, family, config, ids.shape)
        from_hooks[name] = (array, f"hf:{module}" + ("" if take == "output" else f" {take}"))

    if family in hf_routes.ROUTED:
        return from_hooks, hf_routes.route_outputs(family, out, config, headless, mask, pooling or ("mean", False))
    n_layers = config.num_hidden_layers
    hidden = out.hidden_states  # n_layers + 1 entries; the last one is after the final norm
    from_outputs = {"embed.out": (_np(hidden[0]), "hf:hidden_states[0]")}
    for i in range(n_layers - 1):
        from_outputs[f"blocks.{i}.resid_post"] = (_np(hidden[i + 1]), f"hf:hidden_states[{i + 1}]")
    for i, weights in enumerate(out.attentions):
        from_outputs[f"blocks.{i}.attn.weights"] = (_np(weights), f"hf:attentions[{i}]")
    order = step_order(family, config, headless)
    last = next(n for n in ("project_out", "final_norm.out", f"blocks.{n_layers - 1}.resid_post") if n in order)
    from_outputs[last] = (_np(hidden[-1]), f"hf:hidden_states[{n_layers}]")  # the model's last_hidden_state
    from_outputs["logits"] = (_np(out.logits), "hf:logits")
    from_outputs["probs"] = (_np(torch.softmax(out.logits, dim=-1)), "softmax(logits)")
    return from_hooks, from_outputs


class _Record:
    """What one module saw during the forward pass."""

    __slots__ = ("calls", "input0", "kwargs", "output")

    def __init__(self):
        self.calls = 0
        self.input0 = self.kwargs = self.output = None


def _install_hooks(model, family: str, config, headless: bool = False) -> tuple[dict[str, _Record], list]:
    """A recording forward hook on every module the family's steps come from: (records by path, handles)."""
    modules = dict(model.named_modules())
    paths = set()
    for name in step_order(family, config, headless):
        if name not in ("probs", "pooled") and hf_source(family, name, headless) is not None:
            paths.add(hf_source(family, name, headless)[0])
    records: dict[str, _Record] = {}
    handles = []
    for path in sorted(paths):
        if path not in modules:
            raise TracerError(f"{family}: transformers model has no module {path!r}", hint="transformers version mismatch?")
        record = records[path] = _Record()

        def hook(module, args, kwargs, output, record=record):
            record.calls += 1
            if record.calls > 1:  # a module reused within one pass would make the step ambiguous
                raise TracerError(f"module called more than once in one forward pass: {module.__class__.__name__}")
            record.input0 = args[0] if args else kwargs.get("hidden_states")
            record.kwargs = kwargs
            record.output = output

        handles.append(modules[path].register_forward_hook(hook, with_kwargs=True))
    return records, handles


def _take(record: _Record, take: str):
    if record.calls == 0:
        return None
    output = record.output
    if take == "output" or take.startswith("split:"):
        return output[0] if isinstance(output, tuple) else output
    if take == "sigmoid(output)":  # qwen2_moe's shared expert gate, as the block applies it
        return output.sigmoid()
    if take in ("output[1]", "output[2]"):
        return output[int(take[-2])]
    if take == "input[0]":
        return record.input0
    if take.startswith("kwarg:"):
        return record.kwargs.get(take.split(":", 1)[1])
    raise ValueError(f"unknown take {take!r}")


def head_sizes(config, name: str = "") -> tuple[int, int, int]:
    """(heads, kv_heads, d_head) as transformers uses them in the stack of step `name` (BART's decoder has
    decoder_attention_heads, its encoder num_attention_heads = encoder_attention_heads)."""
    heads = config.num_attention_heads
    if name.startswith("decoder.") and getattr(config, "decoder_attention_heads", None):
        heads = config.decoder_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    d_head = getattr(config, "head_dim", None) or config.hidden_size // heads  # t5: d_kv (attribute map)
    return heads, kv_heads, d_head


def _to_layout(value, name: str, take: str, family: str, config, batch_pos: tuple[int, int]) -> np.ndarray:
    """Bring a hooked tensor to the step's tracer layout."""
    batch, pos = batch_pos
    axes = hf_routes.step_axes(name)
    if name.endswith(".cross_attn.mask"):
        return hf_routes.cross_mask_rows(_np(value == 0) if value.dtype.is_floating_point else _np(value))
    if name.endswith(".attn.mask"):
        return _np(value == 0) if value.dtype.is_floating_point else _np(value)  # additive 0 / dtype-min -> keep
    if name.endswith("embed.positions") and value.shape[0] == 1 < batch:  # bert, bart: one row broadcast over the batch
        value = value.expand(batch, *value.shape[1:])
    if take.startswith("split:"):
        part = take.split(":", 1)[1]
        value = value.reshape(batch, pos, -1)
        if part in ("gate", "up"):
            gate, up = value.chunk(2, dim=-1)
            return _np(gate if part == "gate" else up)
        return _np(split_qkv(value, part, FUSED_QKV[family], *head_sizes(config, name)))
    if (family, _template_of(name)[0]) in HEADS_FIRST:  # gemma3 norms q/k after the transpose
        return _np(value)
    if axes[1] in ("heads", "kv_heads") and axes[-1] == "d_head":
        _, _, d_head = head_sizes(config, name)  # [batch, len, heads*d_head] -> [batch, heads, len, d_head]
        rows, length = value.shape[:2]  # decoder and cross-attention steps have their own lengths
        return _np(value.reshape(rows, length, -1, d_head).transpose(1, 2))
    if axes == ("batch", "pos"):  # one scalar per token from a [batch*pos, 1] module output
        return _np(value.reshape(batch, pos))
    if axes[:2] == ("batch", "pos") and len(axes) == 3 and value.ndim == 2:
        return _np(value.reshape(batch, pos, -1))  # OPT's MLP runs on [batch*pos, features]
    return _np(value)


def split_qkv(fused, part: str, layout: str, heads: int, kv_heads: int, d_head: int):
    """One of q, k, v from a fused projection output [batch, pos, ...] as [batch, heads, pos, d_head]."""
    batch, pos, _ = fused.shape
    if layout == "per_head":  # [h0: q k v, h1: q k v, ...]
        per_head = fused.reshape(batch, pos, heads, 3 * d_head)
        index = "qkv".index(part)
        chosen = per_head[..., index * d_head : (index + 1) * d_head]
        return chosen.transpose(1, 2)
    widths = {"q": heads * d_head, "k": kv_heads * d_head, "v": kv_heads * d_head}
    start = {"q": 0, "k": widths["q"], "v": widths["q"] + widths["k"]}[part]
    chosen = fused[..., start : start + widths[part]]
    return chosen.reshape(batch, pos, -1, d_head).transpose(1, 2)


def _np(tensor) -> np.ndarray:
    return tensor.detach().cpu().contiguous().numpy().copy()
