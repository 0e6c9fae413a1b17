"""Where each tracer step lives in a transformers model (transformers 5.x module tree, pure data).

For every family: step-name template -> (module path template, take), in
execution order. `take` says how the value comes out of that module during
the forward pass:

    "output"          the module's return value (first element if it is a tuple)
    "output[1]"       second element of the returned tuple (attention weights)
    "input[0]"        first positional input (or `hidden_states=` when passed by keyword)
    "kwarg:NAME"      keyword argument NAME of the call (the additive attention mask)
    "split:q|k|v"     one third of a fused q/k/v projection's output; the layout is
                      the family's FUSED_QKV entry
    "split:gate|up"   one half of a fused gate/up projection's output, [gate; up]

The tensor comes out as [batch, pos, features] (OPT flattens its MLP to
[batch*pos, features]); q/k/v and attn.z are split into heads to become
[batch, heads, pos, d_head]. `blocks.{i}.resid_post` of the last block and
`final_norm.out` are distinct here: transformers' last `hidden_states` entry is
after the final norm.

Steps computed inside a function rather than a module (q_rot/k_rot, scores,
masked_scores, probs) have no entry; `hf_module` gives None for them.

Encoder-only families (bert, roberta) are mapped as their *ForMaskedLM
models name modules (`bert.encoder.layer.3...`); a headless BertModel /
RobertaModel has the same tree without the `bert.` / `roberta.` prefix
(HEADLESS_PREFIX; pass `headless=True`). Encoder-decoder families (t5, bart)
prefix step names with `encoder.` / `decoder.`; the decoder's cross-attention
steps are `decoder.blocks.{i}.cross_attn.*`. `output[2]` is the third element
of a returned tuple (T5Attention returns (out, position_bias, weights)).

Kept free of torch so the engine and `tracer diff --names hf` can use it.
"""

from __future__ import annotations

import re

from tracer.names.hf_base import BASE_CONDITIONS, BASE_NAMES, Source
from tracer.names.hf_decoders import (DECODER_CONDITIONS, DECODER_HEADS_FIRST, DECODER_LAYER_CONDITIONS, DECODER_NAMES,
                                      OPT_CONDITIONS, ORDER_BY_CONFIG, opt_with_projections)

__all__ = ["CONDITIONS", "ENCODER_DECODER", "ENCODER_ONLY", "FUSED_QKV", "HEADLESS_PREFIX", "HEADS_FIRST", "HF_NAMES",
           "LAYER_CONDITIONS", "Source", "hf_module", "hf_source", "names_in_order", "step_for_module"]

# How a fused q/k/v output is laid out on its last axis.
#   "blocks":     [q (heads*d) ; k (kv_heads*d) ; v (kv_heads*d)]    gpt2 c_attn, phi3 qkv_proj
#   "per_head":   [h0: q k v, h1: q k v, ...], each d_head wide       gpt_neox query_key_value
FUSED_QKV: dict[str, str] = {"gpt2": "blocks", "phi3": "blocks", "gpt_neox": "per_head"}

# What a headless encoder (BertModel, RobertaModel: no head) lacks in front of every module path.
HEADLESS_PREFIX: dict[str, str] = {"bert": "bert.", "roberta": "roberta."}

# Families with encoder and decoder stacks (step names prefixed `encoder.` / `decoder.`), and encoder-only ones.
ENCODER_DECODER = ("t5", "bart")
ENCODER_ONLY = ("bert", "roberta")

# family -> step-name template -> (module path template, take), in execution order: the first families
# (hf_base), OPT with its optional projections, then the decoder families of issue 10 (hf_decoders).
HF_NAMES: dict[str, dict[str, Source]] = {**BASE_NAMES, "opt": opt_with_projections(BASE_NAMES["opt"]), **DECODER_NAMES}

# Steps that exist only under a config condition: (family, template) -> (config field, required value),
# or a predicate on the config.
CONDITIONS: dict[tuple[str, str], object] = {**BASE_CONDITIONS, **OPT_CONDITIONS, **DECODER_CONDITIONS}

# Steps that exist only in some layers: (family, template) -> predicate(config, layer) (qwen2/3_moe: the MoE
# layers have a router, the mlp_only_layers a dense MLP).
LAYER_CONDITIONS: dict[tuple[str, str], object] = dict(DECODER_LAYER_CONDITIONS)

# (family, template) whose module output is already [batch, heads, pos, d_head] (normed after the transpose)
HEADS_FIRST: frozenset[tuple[str, str]] = frozenset(DECODER_HEADS_FIRST)


def names_in_order(family: str, config) -> dict[str, Source]:
    """The family's table in the execution order of this config (OPT-350m norms after attention)."""
    reorder = ORDER_BY_CONFIG.get(family)
    return reorder(HF_NAMES[family], config) if reorder is not None else HF_NAMES[family]


_BLOCK = re.compile(r"^((?:encoder|decoder)\.)?blocks\.(\d+)\.(.+)$")


def _template_of(step_name: str) -> tuple[str, int | None]:
    m = _BLOCK.match(step_name)
    if m:
        return (m.group(1) or "") + "blocks.{i}." + m.group(3), int(m.group(2))
    return step_name, None


def hf_source(family: str, step_name: str, headless: bool = False) -> Source | None:
    """(concrete module path, take) for a concrete step name, or None when no module holds it.

    headless: the model is a bare BertModel / RobertaModel (paths lose their `bert.` prefix; no head steps).
    """
    template, block = _template_of(step_name)
    source = HF_NAMES.get(family, {}).get(template)
    if source is None:
        return None
    module, take = source
    if headless and family in HEADLESS_PREFIX:
        prefix = HEADLESS_PREFIX[family]
        if not module.startswith(prefix):
            return None  # a head step: a headless model has none
        module = module[len(prefix) :]
    return (module.format(i=block) if block is not None else module), take


def hf_module(family: str, step_name: str, headless: bool = False) -> str | None:
    """The transformers module a step comes from: `blocks.3.attn.q` -> `model.layers.3.self_attn.q_proj`."""
    source = hf_source(family, step_name, headless)
    return source[0] if source else None


def step_for_module(family: str, module_path: str, take: str = "output") -> str | None:
    """The tracer step a transformers module's value is, for mapping foreign dumps.

    Ambiguous modules (a fused q/k/v projection, an attention module's output
    pair) need `take` to choose; the first matching step in execution order wins.
    A headless encoder's paths (`encoder.layer.0...` of a BertModel) are matched too.
    """
    step = _step_for_path(family, module_path, take)
    prefix = HEADLESS_PREFIX.get(family)
    if step is None and prefix and not module_path.startswith(prefix):
        step = _step_for_path(family, prefix + module_path, take)
    return step


def _step_for_path(family: str, module_path: str, take: str) -> str | None:
    for template, (module_template, source_take) in HF_NAMES.get(family, {}).items():
        if source_take != take:
            continue
        pattern = "^" + re.escape(module_template).replace(r"\{i\}", r"(\d+)") + "$"
        m = re.match(pattern, module_path)
        if m:
            return template.format(i=m.group(1)) if m.groups() else template
    return None
