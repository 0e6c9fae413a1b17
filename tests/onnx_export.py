"""Exports of the fixtures with torch's two ONNX exporters, as porters make them (live tests only).

The TorchScript exporter (`dynamo=False`) traces Python ints as graph inputs, so transformers'
`logits_to_keep` would become a Gather of one position: it exports a thin wrapper whose attributes carry
the model's own module names (`model`, `lm_head`, ...), so the scopes are transformers' paths. The dynamo
exporter takes the model itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _load(folder: Path):
    import transformers

    from tracer.capture.hf_routes import auto_class

    config = transformers.AutoConfig.from_pretrained(folder)
    cls = auto_class(transformers, config)
    model = cls.from_pretrained(folder, attn_implementation="eager").eval()
    return model, config


def _inputs(torch, config, ids: np.ndarray, decoder_ids: np.ndarray | None):
    args = {"input_ids": torch.tensor(ids), "attention_mask": torch.ones(ids.shape, dtype=torch.int64)}
    if decoder_ids is not None:
        args["decoder_input_ids"] = torch.tensor(decoder_ids)
    return args



def export(folder: Path, out: Path, exporter: str, ids: np.ndarray, decoder_ids: np.ndarray | None = None) -> Path:
    import torch

    model, config = _load(folder)
    kwargs = _inputs(torch, config, ids, decoder_ids)
    names = list(kwargs)
    if exporter == "dynamo":
        batch, pos = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("pos", min=2, max=64)
        shapes = {n: {0: batch, 1: pos} if n != "decoder_input_ids" else {0: batch, 1: torch.export.Dim("dec", min=1, max=64)}
                  for n in names}
        torch.onnx.export(model, (), str(out), kwargs={**kwargs, "use_cache": False}, dynamo=True,
                          dynamic_shapes={**shapes, "use_cache": None}, verbose=False)
        return out
    wrapped = _wrap(torch, model, names)
    torch.onnx.export(wrapped, tuple(kwargs[n] for n in names), str(out), input_names=names, dynamo=False,
                      dynamic_axes={n: {0: "batch", 1: "pos" if n != "decoder_input_ids" else "dec"} for n in names},
                      opset_version=17)
    return out


def _wrap(torch, model, names: list[str]):
    """model's children under their own attribute names; forward calls the model's forward unchanged
    except that a head gets all positions and no cache comes back."""

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name, child in model.named_children():
                self.add_module(name, child)
            self._forward = model.forward

        def forward(self, *args):
            out = self._forward(**dict(zip(names, args)), use_cache=False, return_dict=True)
            return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state

    return Wrapped()


# Decoders with a cache, as optimum and onnxruntime-genai lay them out: inputs input_ids, attention_mask,
# position_ids, past_key_values.N.key / .value ([batch, kv_heads, past, d_head]); outputs logits,
# present.N.key / .value ([batch, kv_heads, past + pos, d_head]).

def cache_names(n_layers: int, prefix: str) -> list[str]:
    return [f"{prefix}.{i}.{kv}" for i in range(n_layers) for kv in ("key", "value")]


def _kv_shape(config, batch: int, past: int) -> tuple[int, int, int, int]:
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    d_head = getattr(config, "head_dim", None) or config.hidden_size // heads
    return batch, kv_heads, past, d_head


def export_with_cache(folder: Path, out: Path, exporter: str, ids: np.ndarray, with_past: bool = True,
                      example_past: int = 2) -> Path:
    """`model.onnx` with past inputs (or optimum's `decoder_model.onnx` without them: with_past=False), taking
    the past as explicit tensors (transformers' DynamicCache inside) and returning logits and the presents.
    The example past has `example_past` positions: a 0-length example would be specialised by torch.export."""
    import torch

    model, config = _load(folder)
    n_layers = config.num_hidden_layers
    wrapped = _cache_wrap(torch, model, n_layers, with_past)
    batch, pos = ids.shape
    past = example_past if with_past else 0
    args = [torch.tensor(ids), torch.ones((batch, past + pos), dtype=torch.int64),
            torch.arange(past, past + pos).expand(batch, pos).contiguous()]
    past_names = cache_names(n_layers, "past_key_values") if with_past else []
    g = torch.Generator().manual_seed(0)
    args += [torch.randn(_kv_shape(config, batch, past), generator=g) for _ in past_names]
    names = ["input_ids", "attention_mask", "position_ids", *past_names]
    outputs = ["logits", *cache_names(n_layers, "present")]
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "past_sequence_length + sequence_length"},
            "position_ids": {0: "batch_size", 1: "sequence_length"},
            **{n: {0: "batch_size", 2: "past_sequence_length"} for n in past_names},
            "logits": {0: "batch_size", 1: "sequence_length"},
            **{n: {0: "batch_size", 2: "past_sequence_length + sequence_length"} for n in outputs[1:]}}
    if exporter == "dynamo":
        Dim = torch.export.Dim
        b, s, p = Dim("batch_size", min=1, max=8), Dim("sequence_length", min=1, max=64), Dim("past", min=0, max=64)
        shapes = ({0: b, 1: s}, {0: b, 1: Dim.AUTO if with_past else s}, {0: b, 1: s},
                  tuple({0: b, 2: p} for _ in past_names))  # *past arrives as one tuple
        torch.onnx.export(wrapped, tuple(args), str(out), input_names=names, output_names=outputs, dynamo=True,
                          dynamic_shapes=shapes, verbose=False)
        return out
    torch.onnx.export(wrapped, tuple(args), str(out), input_names=names, output_names=outputs, dynamo=False,
                      dynamic_axes=axes, opset_version=17)
    return out


def _cache_wrap(torch, model, n_layers: int, with_past: bool):
    """model's children under their own attribute names (scopes read `model.layers.0...`); forward takes the
    past as 2 * n_layers tensors, fills a DynamicCache with them, returns logits and the cache's tensors."""
    from transformers import DynamicCache

    class WithCache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name, child in model.named_children():
                self.add_module(name, child)
            self._forward = model.forward

        def forward(self, input_ids, attention_mask, position_ids, *past):
            pairs = [(past[2 * i], past[2 * i + 1]) for i in range(n_layers)] if with_past else None
            cache = DynamicCache(pairs) if pairs else DynamicCache()
            out = self._forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                past_key_values=cache, use_cache=True, return_dict=True)
            presents = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
            return (out.logits, *presents)

    return WithCache()
