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
                  *([tuple({0: b, 2: p} for _ in past_names)] if with_past else []))  # *past arrives as one tuple
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


def merge_like_optimum(decoder: Path, with_past: Path, out: Path) -> Path:
    """optimum's `decoder_model_merged.onnx` (optimum-onnx `optimum/onnx/graph_transformations.py`
    `merge_decoders`): one `If` on a bool [1] input `use_cache_branch`, then = the graph with past, else = the
    graph without; the branches' initializers in the main graph (equal ones shared, clashing names renamed),
    the inputs the union of both, the outputs the no-past graph's."""
    import onnx
    from onnx import TensorProto, helper

    graphs = [onnx.load(str(p), load_external_data=True).graph for p in (with_past, decoder)]
    inits: dict[str, object] = {}
    values = {o for g in graphs for n in g.node for o in n.output}  # the dynamo exporter names both val_N
    for tag, graph in zip(("with_past", "no_past"), graphs):
        renamed = {}
        for init in graph.initializer:
            if init.name in values or (init.name in inits and
                                       inits[init.name].SerializeToString() != init.SerializeToString()):
                renamed[init.name] = f"{init.name}_{tag}"
            inits.setdefault(renamed.get(init.name, init.name), init)
        for node in graph.node:
            node.input[:] = [renamed.get(i, i) for i in node.input]
        for old, new in renamed.items():
            inits[new] = onnx.TensorProto()
            inits[new].CopyFrom(next(i for i in graph.initializer if i.name == old))
            inits[new].name = new
    branches = [helper.make_graph(list(g.node), name, [], list(g.output)) for g, name in zip(graphs, ("with_past", "no_past"))]
    inputs = {i.name: i for g in graphs for i in g.input}
    if_node = helper.make_node("If", ["use_cache_branch"], [o.name for o in graphs[1].output], name="optimum::if",
                               then_branch=branches[0], else_branch=branches[1])
    merged = helper.make_graph([if_node], "merged", [*inputs.values(),
                               helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])],
                               list(graphs[1].output), list(inits.values()))
    model = onnx.load(str(decoder), load_external_data=False)
    onnx.save(helper.make_model(merged, opset_imports=list(model.opset_import), ir_version=model.ir_version), str(out))
    return out


# optimum's split encoder-decoder: encoder_model.onnx (input_ids, attention_mask -> last_hidden_state) exports
# model.get_encoder(), so its scopes start at the encoder (`block.0...`, `layers.0...`); decoder_model.onnx
# (input_ids = the decoder's, encoder_attention_mask, encoder_hidden_states -> logits, present.N.decoder.* and
# present.N.encoder.*) exports the whole model with the encoder's output given.

def export_seq2seq_split(folder: Path, out_dir: Path, exporter: str, ids: np.ndarray, decoder_ids: np.ndarray) -> Path:
    import torch

    model, config = _load(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    encoder = model.get_encoder()
    enc_args = (torch.tensor(ids), torch.ones(ids.shape, dtype=torch.int64))
    with torch.no_grad():
        hidden = encoder(input_ids=enc_args[0], attention_mask=enc_args[1], return_dict=True).last_hidden_state
    dec_args = (torch.tensor(decoder_ids), enc_args[1], hidden)
    n_layers = getattr(config, "num_decoder_layers", None) or config.decoder_layers
    presents = [f"present.{i}.{stack}.{kv}" for i in range(n_layers) for stack in ("decoder", "encoder")
                for kv in ("key", "value")]
    specs = [(_encoder_wrap(torch, encoder), enc_args, ["input_ids", "attention_mask"], ["last_hidden_state"],
              "encoder_model.onnx", {"input_ids": ("batch_size", "encoder_sequence_length"),
                                     "attention_mask": ("batch_size", "encoder_sequence_length")}),
             (_decoder_wrap(torch, model, n_layers), dec_args,
              ["input_ids", "encoder_attention_mask", "encoder_hidden_states"], ["logits", *presents],
              "decoder_model.onnx", {"input_ids": ("batch_size", "decoder_sequence_length"),
                                     "encoder_attention_mask": ("batch_size", "encoder_sequence_length"),
                                     "encoder_hidden_states": ("batch_size", "encoder_sequence_length")})]
    for module, args, names, outputs, file, axes in specs:
        out = out_dir / file
        if exporter == "dynamo":
            dims = {"batch_size": torch.export.Dim("batch_size", min=1, max=8),
                    "encoder_sequence_length": torch.export.Dim("encoder_sequence_length", min=2, max=64),
                    "decoder_sequence_length": torch.export.Dim("decoder_sequence_length", min=1, max=64)}
            shapes = tuple({0: dims[axes[n][0]], 1: dims[axes[n][1]]} for n in names)
            torch.onnx.export(module, args, str(out), input_names=names, output_names=outputs, dynamo=True,
                              dynamic_shapes=shapes, verbose=False)
        else:
            torch.onnx.export(module, args, str(out), input_names=names, output_names=outputs, dynamo=False,
                              dynamic_axes={n: dict(enumerate(axes[n])) for n in names}, opset_version=17)
    return out_dir


def _encoder_wrap(torch, encoder):
    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name, child in encoder.named_children():
                self.add_module(name, child)
            self._forward = encoder.forward

        def forward(self, input_ids, attention_mask):
            return self._forward(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state

    return Encoder()


def _decoder_wrap(torch, model, n_layers: int):
    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name, child in model.named_children():
                self.add_module(name, child)
            self._forward = model.forward

        def forward(self, input_ids, encoder_attention_mask, encoder_hidden_states):
            out = self._forward(decoder_input_ids=input_ids, attention_mask=encoder_attention_mask,
                                encoder_outputs=(encoder_hidden_states,), use_cache=True, return_dict=True)
            cache = out.past_key_values
            pairs = [(layer.keys, layer.values) for layer in cache.self_attention_cache.layers]
            cross = [(layer.keys, layer.values) for layer in cache.cross_attention_cache.layers]
            return (out.logits, *(t for i in range(n_layers) for t in (*pairs[i], *cross[i])))

    return Decoder()
