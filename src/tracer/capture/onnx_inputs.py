"""What an ONNX export's inputs are, by name, and what tracer feeds each of them.

Names as torch's exporters, optimum and onnxruntime-genai give them (optimum-onnx 0.1.0:
`optimum/exporters/onnx/base.py` `add_past_key_values`, `optimum/onnxruntime/modeling_decoder.py` and
`modeling_seq2seq.py`, the `forward` that feeds a first pass):

    input_ids, attention_mask, position_ids, token_type_ids, decoder_input_ids, decoder_attention_mask
    past_key_values.N.key / .value               a decoder's cache, [batch, kv_heads, past, d_head]
    past_key_values.N.decoder.key / .value       an encoder-decoder's self-attention cache
    past_key_values.N.encoder.key / .value       its cross-attention cache (keys of the encoder output)
    use_cache_branch                             optimum's merged decoder: bool [1], False = the graph without past
    cache_position                               positions written in the cache (arange on a first pass)

optimum's split decoder graph (`decoder_model.onnx`) renames the decoder's inputs: `input_ids` is the
decoder's, `encoder_hidden_states` the encoder's output and `encoder_attention_mask` the prompt's mask.

A first pass has no past: optimum feeds every past input zeros of length 0 and, to a merged decoder,
`use_cache_branch = [False]`. tracer does the same, with the heads and d_head of its own run's keys. A
cross-attention past is only fed to a merged decoder (whose no-past branch does not read it): a graph that
would attend to it (optimum's `decoder_with_past_model.onnx`) is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tracer.errors import TracerError

# How optimum / onnxruntime-genai / torch's exporters name the inputs (TorchScript appends `.1`).
INPUT_ROLES = {"input_ids": "ids", "input": "ids", "attention_mask": "mask", "position_ids": "positions",
               "token_type_ids": "token_types", "decoder_input_ids": "decoder_ids",
               "decoder_attention_mask": "decoder_mask", "logits_to_keep": "logits_to_keep",
               "num_logits_to_keep": "logits_to_keep", "use_cache_branch": "use_cache_branch",
               "cache_position": "cache_position"}
# optimum's split decoder graph: its input_ids and attention_mask are the decoder's
SPLIT_DECODER_ROLES = {**INPUT_ROLES, "input_ids": "decoder_ids", "attention_mask": "decoder_mask",
                       "encoder_hidden_states": "encoder_hidden", "encoder_outputs": "encoder_hidden",
                       "encoder_attention_mask": "mask"}
_PAST = re.compile(r"^(?:past_key_values|past)\.(\d+)\.(?:(decoder|encoder)\.)?(key|value)$")


@dataclass(frozen=True)
class PastInput:
    name: str
    layer: int
    cross: bool  # past_key_values.N.encoder.*: cross-attention keys / values
    part: str  # key or value


def is_split_decoder(graph) -> bool:
    """optimum's decoder graph of an encoder-decoder: it takes the encoder's output as an input."""
    return any(_base(i.name) in ("encoder_hidden_states", "encoder_outputs") for i in graph.input)


def input_role(name: str, split_decoder: bool = False) -> str | None:
    """The role of a graph input from its name (`input_ids`, TorchScript's `input.1`, `past_key_values.0.key`)."""
    if name.startswith(("past_key_values.", "past.")):
        return "past"
    return (SPLIT_DECODER_ROLES if split_decoder else INPUT_ROLES).get(_base(name))


def _base(name: str) -> str:
    head, _, tail = name.rpartition(".")
    return head if head and tail.isdigit() else name


def past_input(inp) -> PastInput:
    """A past input's layer and part, or an error naming it when its name or rank is not optimum's layout."""
    found = _PAST.match(inp.name)
    dims = inp.type.tensor_type.shape.dim
    if found is None or len(dims) != 4:
        rank = f"rank {len(dims)}" if found is not None else "its name"
        raise TracerError(f"the ONNX graph's past input {inp.name!r} is not laid out as tracer fills a cache "
                          f"({rank}): tracer feeds past_key_values.N.key / .value (or .decoder. / .encoder.) "
                          "as [batch, kv_heads, past, d_head]",
                          hint="export with transformers' DynamicCache layout (optimum's past_key_values.N.key)")
    return PastInput(inp.name, int(found.group(1)), found.group(2) == "encoder", found.group(3))


def empty_past(inp, batch: int, kv: tuple[int, int] | None) -> np.ndarray:
    """Zeros [batch, kv_heads, 0, d_head] for a past input; its fixed axes must agree with tracer's keys."""
    dims = [d.dim_value if d.HasField("dim_value") else None for d in inp.type.tensor_type.shape.dim]
    heads, d_head = kv if kv is not None else (dims[1], dims[3])
    if heads is None or d_head is None:
        raise TracerError(f"the ONNX graph's past input {inp.name!r} has no fixed heads / d_head axes and tracer's "
                          "run records no keys to take them from")
    if (dims[1] not in (None, heads)) or (dims[3] not in (None, d_head)) or dims[2] not in (None, 0):
        shown = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
        raise TracerError(f"the ONNX graph's past input {inp.name!r} is {shown}; tracer's keys are "
                          f"[batch, {heads}, past, {d_head}] and a first pass feeds past = 0",
                          hint="the export's kv heads or head size differ from --model's, or its past is fixed")
    return np.zeros((batch, heads, 0, d_head), dtype=_input_dtype(inp))


def feeds_for(graph, values: dict[str, np.ndarray], kv: dict[bool, tuple[int, int]] | None = None
              ) -> dict[str, np.ndarray]:
    """The graph's inputs, filled by role from `values` (ids, mask, positions, token_types, decoder_ids,
    decoder_mask, encoder_hidden); a past gets zeros of length 0 (kv: cross? -> (kv_heads, d_head) from
    tracer's run). An input tracer cannot fill is an error naming it."""
    split = is_split_decoder(graph)
    names = {i.name for i in graph.input}
    merged = "use_cache_branch" in names
    ids = values.get("decoder_ids" if split else "ids")
    by_role = {"logits_to_keep": np.array(0, np.int64), "use_cache_branch": np.array([False]),
               **({"cache_position": np.arange(ids.shape[1], dtype=np.int64)} if ids is not None else {}),
               **values}
    feeds = {}
    for inp in graph.input:
        role = input_role(inp.name, split)
        if role == "past":
            past = past_input(inp)
            if past.cross and not merged:
                raise TracerError(f"the ONNX graph reads a cross-attention cache ({inp.name!r}) but has no "
                                  "use_cache_branch: a decoder with past (optimum's decoder_with_past_model.onnx) "
                                  "cannot run a first pass", hint="capture decoder_model.onnx or decoder_model_merged.onnx")
            batch = (ids if ids is not None else values["ids"]).shape[0]
            feeds[inp.name] = empty_past(inp, batch, (kv or {}).get(past.cross))
            continue
        value = by_role.get(role) if role else None
        if value is None:
            known = sorted(SPLIT_DECODER_ROLES if split else INPUT_ROLES)
            raise TracerError(f"the ONNX graph takes an input {inp.name!r} tracer cannot fill",
                              hint="inputs tracer knows: " + ", ".join(known) + ", past_key_values.N.key/value")
        _check_static_shape(inp, value)
        feeds[inp.name] = value.astype(_input_dtype(inp), copy=False)
    return feeds


def _check_static_shape(inp, value: np.ndarray) -> None:
    dims = [d.dim_value if d.HasField("dim_value") else None for d in inp.type.tensor_type.shape.dim]
    if len(dims) != value.ndim or any(d is not None and d != n for d, n in zip(dims, value.shape)):
        fixed = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
        raise TracerError(f"the ONNX graph's input {inp.name!r} has the fixed shape {fixed}; this input is "
                          f"{list(value.shape)}", hint="export with dynamic axes (dynamic_shapes= / dynamic_axes=), "
                          "or give --ids of that length")


def _input_dtype(inp):
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)


def kv_dims(reference) -> dict[bool, tuple[int, int]]:
    """(kv_heads, d_head) of tracer's self-attention keys (False) and cross-attention keys (True)."""
    out = {}
    for cross, names in ((False, ("blocks.0.attn.k", "decoder.blocks.0.attn.k")),
                         (True, ("decoder.blocks.0.cross_attn.k",))):
        step = next((reference.step(n) for n in names if n in reference), None)
        if step is not None and len(step.shape) == 4:
            out[cross] = (int(step.shape[1]), int(step.shape[3]))
    return out


def reference_inputs(reference) -> dict[str, np.ndarray]:
    """The inputs of tracer's run by role, as onnx_inputs.feeds_for takes them."""
    roles = {"ids": "input.ids", "mask": "input.mask", "positions": "input.positions",
             "token_types": "input.token_types", "decoder_ids": "input.decoder_ids",
             "decoder_mask": "input.decoder_mask"}
    return {role: reference[name] for role, name in roles.items() if name in reference}
