"""Canonical weight names and the shapes a Spec implies for them.

Every adapter maps its family's HF tensors onto these names, in the [in, out]
orientation the engine multiplies by (`x @ W`). The loader checks each against
`expected_shapes`, so a config that disagrees with its weights is caught at load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from tracer.arch.spec import Spec

Getter = Callable[[str], np.ndarray]


@dataclass(frozen=True)
class Source:
    """Where a canonical weight comes from: an HF tensor name and how to reshape it."""

    hf_name: str
    transform: Callable[[np.ndarray], np.ndarray] = lambda a: a
    aliases: tuple[str, ...] = ()  # older names of the same tensor (e.g. Pythia's embed_out), or what it is tied to
    # stored tensors that feed nothing once `hf_name` itself is found: the tensor transformers would have tied
    # it to (an untied model keeps `model.shared` and the MLM head's `bias` as dead parameters)
    supersedes: tuple[str, ...] = ()


def transposed(hf_name: str, aliases: tuple[str, ...] = ()) -> Source:
    """An nn.Linear weight stored [out, in], used as [in, out] (a view, no copy)."""
    return Source(hf_name, lambda a: a.T, aliases)


def rows_transposed(hf_name: str, start: int, stop: int) -> Source:
    """Rows start:stop of a fused [out, in] weight, as [in, out]."""
    return Source(hf_name, lambda a: a[start:stop].T)


def superseded(sources: dict[str, Source], stored: dict[str, str]) -> list[str]:
    """Stored tensors no weight needs because the one that would have read them has its own copy
    (`stored`: canonical name -> the HF name found in the files, maybe without its `model.` prefix)."""
    def own(hf: str, src: Source) -> bool:
        return hf in (src.hf_name, src.hf_name.split(".", 1)[-1])

    return [form for canonical, hf in stored.items() if own(hf, sources[canonical])
            for name in sources[canonical].supersedes for form in (name, name.split(".", 1)[-1])]


def expected_shapes(spec: Spec) -> dict[str, tuple[int, ...]]:
    """Every canonical weight the engine reads, with its shape. Encoder-decoder models prefix each
    stack's weights with `encoder.` / `decoder.`; the encoder reads `embed.W_E`, the decoder `decoder.embed.W_E`
    (one stored tensor when the checkpoint ties them, as transformers does)."""
    shapes: dict[str, tuple[int, ...]] = {"embed.W_E": (spec.vocab_size, spec.d_embed or spec.d_model)}
    if spec.encoder is not None:
        shapes["decoder.embed.W_E"] = shapes["embed.W_E"]
        shapes.update(stack_shapes(spec.encoder, "encoder."))
        shapes.update(stack_shapes(spec, "decoder."))
    else:
        shapes.update(stack_shapes(spec, ""))
    shapes.update(head_shapes(spec))
    return shapes


def _norm_shapes(name: str, spec: Spec, width: int | None = None) -> dict[str, tuple[int, ...]]:
    width = width or spec.d_model
    shapes = {name + ".w": (width,)}
    if spec.norm == "layernorm":
        shapes[name + ".b"] = (width,)
    return shapes


def block_norms(spec: Spec) -> tuple[str, ...]:
    """The norms of one block, by where they sit (norm_placement, shared parallel norm, cross-attention)."""
    norms = {"sandwich": ("ln1", "ln1_post", "ln2", "ln2_post"), "after": ("ln1_post", "ln2_post")}.get(
        spec.norm_placement, ("ln1",) if spec.shared_norm else ("ln1", "ln2"))
    return norms + (("ln_cross",) if spec.cross_attention else ())


def stack_shapes(spec: Spec, prefix: str) -> dict[str, tuple[int, ...]]:
    """Embedding extras, blocks and final norm of one stack (prefix "" for a single-stack model)."""
    d, f = spec.d_model, spec.d_ff
    q_out, kv_out = spec.n_heads * spec.d_head, spec.n_kv_heads * spec.d_head
    shapes: dict[str, tuple[int, ...]] = {}
    if spec.d_embed is not None:
        shapes["project_in.W"] = (spec.d_embed, d)
        shapes["project_out.W"] = (d, spec.d_embed)
    if spec.positions == "learned":
        shapes[prefix + "embed.W_pos"] = (spec.max_positions + spec.position_offset, d)
    if spec.token_types:
        shapes[prefix + "embed.W_type"] = (spec.token_types, d)
    if spec.embed_norm:
        shapes.update(_norm_shapes(prefix + "embed.ln", spec))
    if spec.relative_bias is not None:
        shapes[prefix + "rel_bias.W"] = (spec.relative_bias.num_buckets, spec.n_heads)
    sublayers = ("attn", "cross_attn") if spec.cross_attention else ("attn",)
    for i in range(spec.n_layers):
        p = f"{prefix}blocks.{i}."
        for norm in block_norms(spec):
            shapes.update(_norm_shapes(p + norm, spec))
        for part in sublayers:
            a = p + part + "."
            shapes.update({a + "W_q": (d, q_out), a + "W_k": (d, kv_out), a + "W_v": (d, kv_out), a + "W_o": (q_out, d)})
            if spec.qkv_bias:
                shapes.update({a + "b_q": (q_out,), a + "b_k": (kv_out,), a + "b_v": (kv_out,)})
            if spec.o_bias:
                shapes[a + "b_o"] = (d,)
            if spec.qk_norm != "none" and part == "attn":
                per_head = spec.qk_norm == "head"
                shapes.update(_norm_shapes(a + "q_norm", spec, spec.d_head if per_head else q_out))
                shapes.update(_norm_shapes(a + "k_norm", spec, spec.d_head if per_head else kv_out))
        if spec.moe is not None and spec.moe.on(i):
            shapes.update(moe_shapes(spec, p))
            continue
        shapes[p + "mlp.W_in"] = (d, f)
        if spec.mlp == "gated":
            shapes[p + "mlp.W_up"] = (d, f)
        shapes[p + "mlp.W_out"] = (f, d)
        if spec.mlp_bias:
            shapes[p + "mlp.b_in"] = (f,)
            if spec.mlp == "gated":
                shapes[p + "mlp.b_up"] = (f,)
            shapes[p + "mlp.b_out"] = (d,)
    if spec.final_norm:
        shapes.update(_norm_shapes(prefix + "final_norm", spec))
    return shapes


def moe_shapes(spec: Spec, p: str) -> dict[str, tuple[int, ...]]:
    """One MoE layer: the router [d_model, n_experts], each expert's gated MLP, and any shared expert."""
    d, m = spec.d_model, spec.moe
    shapes: dict[str, tuple[int, ...]] = {p + "mlp.W_router": (d, m.n_experts)}
    for e in range(m.n_experts):
        x = f"{p}mlp.experts.{e}."
        shapes.update({x + "W_in": (d, m.d_expert), x + "W_up": (d, m.d_expert), x + "W_out": (m.d_expert, d)})
    if m.d_shared:  # qwen2_moe: the shared expert and its gate
        x, f = p + "mlp.shared.", m.d_shared
        shapes.update({x + "W_in": (d, f), x + "W_up": (d, f), x + "W_out": (f, d), x + "W_gate": (d, 1)})
    return shapes


def head_shapes(spec: Spec) -> dict[str, tuple[int, ...]]:
    """The output head: the unembedding (and the MLM transform before it); nothing for head "none"."""
    d, v = spec.d_model, spec.vocab_size
    shapes: dict[str, tuple[int, ...]] = {}
    if spec.head == "none":
        return shapes
    if spec.head == "mlm":
        shapes.update({"head.W_dense": (d, d), "head.b_dense": (d,), "head.ln.w": (d,), "head.ln.b": (d,)})
    shapes["unembed.W_U"] = (spec.d_embed or d, v)
    if spec.head_bias:
        shapes["unembed.b_U"] = (v,)
    return shapes
