"""transformers module paths of the first families (gpt2, llama-like, gpt_neox, opt, bert, roberta, t5, bart).

Pure data for tracer.names.hf (which documents the conventions and assembles the tables); no torch, and
no import of hf.py: the tables go one way, into it.
"""

from __future__ import annotations

Source = tuple[str, str]  # (module path template, take)

# Steps that exist only under a config condition: (family, template) -> (config field, required value),
# or a predicate on the config.
BASE_CONDITIONS: dict[tuple[str, str], object] = {
    ("gpt_neox", "blocks.{i}.resid_mid"): ("use_parallel_residual", False),
    ("t5", "encoder.blocks.{i}.mlp.up"): ("is_gated_act", True),
    ("t5", "decoder.blocks.{i}.mlp.up"): ("is_gated_act", True),
}


def llama_like(*, fused_qkv: bool = False, fused_gate_up: bool = False, embed_tokens: bool = True) -> dict[str, Source]:
    layer = "model.layers.{i}"
    names: dict[str, Source] = {}
    if embed_tokens:  # gemma's embedding module already multiplies by sqrt(d_model): no raw lookup to hook
        names["embed.tokens"] = ("model.embed_tokens", "output")
    names["embed.out"] = ("model.embed_tokens", "output")
    names["blocks.{i}.ln1.out"] = (f"{layer}.input_layernorm", "output")
    for part in ("q", "k", "v"):
        if fused_qkv:
            names[f"blocks.{{i}}.attn.{part}"] = (f"{layer}.self_attn.qkv_proj", f"split:{part}")
        else:
            names[f"blocks.{{i}}.attn.{part}"] = (f"{layer}.self_attn.{part}_proj", "output")
    names["blocks.{i}.attn.mask"] = (f"{layer}.self_attn", "kwarg:attention_mask")
    names["blocks.{i}.attn.weights"] = (f"{layer}.self_attn", "output[1]")
    names["blocks.{i}.attn.z"] = (f"{layer}.self_attn.o_proj", "input[0]")
    names["blocks.{i}.attn.out"] = (f"{layer}.self_attn", "output")
    names["blocks.{i}.resid_mid"] = (f"{layer}.post_attention_layernorm", "input[0]")
    names["blocks.{i}.ln2.out"] = (f"{layer}.post_attention_layernorm", "output")
    if fused_gate_up:
        names["blocks.{i}.mlp.pre"] = (f"{layer}.mlp.gate_up_proj", "split:gate")
        names["blocks.{i}.mlp.up"] = (f"{layer}.mlp.gate_up_proj", "split:up")
    else:
        names["blocks.{i}.mlp.pre"] = (f"{layer}.mlp.gate_proj", "output")
        names["blocks.{i}.mlp.up"] = (f"{layer}.mlp.up_proj", "output")
    names["blocks.{i}.mlp.post"] = (f"{layer}.mlp.down_proj", "input[0]")
    names["blocks.{i}.mlp.out"] = (f"{layer}.mlp", "output")
    names["blocks.{i}.resid_post"] = (layer, "output")
    names["final_norm.out"] = ("model.norm", "output")
    names["logits"] = ("lm_head", "output")
    return names


_GPT2: dict[str, Source] = {
    "embed.tokens": ("transformer.wte", "output"),
    "embed.positions": ("transformer.wpe", "output"),
    "embed.out": ("transformer.drop", "output"),
    "blocks.{i}.ln1.out": ("transformer.h.{i}.ln_1", "output"),
    "blocks.{i}.attn.q": ("transformer.h.{i}.attn.c_attn", "split:q"),
    "blocks.{i}.attn.k": ("transformer.h.{i}.attn.c_attn", "split:k"),
    "blocks.{i}.attn.v": ("transformer.h.{i}.attn.c_attn", "split:v"),
    "blocks.{i}.attn.mask": ("transformer.h.{i}.attn", "kwarg:attention_mask"),
    "blocks.{i}.attn.weights": ("transformer.h.{i}.attn", "output[1]"),
    "blocks.{i}.attn.z": ("transformer.h.{i}.attn.c_proj", "input[0]"),
    "blocks.{i}.attn.out": ("transformer.h.{i}.attn", "output"),
    "blocks.{i}.resid_mid": ("transformer.h.{i}.ln_2", "input[0]"),
    "blocks.{i}.ln2.out": ("transformer.h.{i}.ln_2", "output"),
    "blocks.{i}.mlp.pre": ("transformer.h.{i}.mlp.c_fc", "output"),
    "blocks.{i}.mlp.post": ("transformer.h.{i}.mlp.c_proj", "input[0]"),
    "blocks.{i}.mlp.out": ("transformer.h.{i}.mlp", "output"),
    "blocks.{i}.resid_post": ("transformer.h.{i}", "output"),
    "final_norm.out": ("transformer.ln_f", "output"),
    "logits": ("lm_head", "output"),
}

_GPT_NEOX: dict[str, Source] = {
    "embed.tokens": ("gpt_neox.embed_in", "output"),
    "embed.out": ("gpt_neox.emb_dropout", "output"),
    "blocks.{i}.ln1.out": ("gpt_neox.layers.{i}.input_layernorm", "output"),
    "blocks.{i}.attn.q": ("gpt_neox.layers.{i}.attention.query_key_value", "split:q"),
    "blocks.{i}.attn.k": ("gpt_neox.layers.{i}.attention.query_key_value", "split:k"),
    "blocks.{i}.attn.v": ("gpt_neox.layers.{i}.attention.query_key_value", "split:v"),
    "blocks.{i}.attn.mask": ("gpt_neox.layers.{i}.attention", "kwarg:attention_mask"),
    "blocks.{i}.attn.weights": ("gpt_neox.layers.{i}.attention", "output[1]"),
    "blocks.{i}.attn.z": ("gpt_neox.layers.{i}.attention.dense", "input[0]"),
    "blocks.{i}.attn.out": ("gpt_neox.layers.{i}.attention", "output"),
    # only with use_parallel_residual=False (see CONDITIONS); in the parallel block ln2 reads the block input
    "blocks.{i}.resid_mid": ("gpt_neox.layers.{i}.post_attention_layernorm", "input[0]"),
    "blocks.{i}.ln2.out": ("gpt_neox.layers.{i}.post_attention_layernorm", "output"),
    "blocks.{i}.mlp.pre": ("gpt_neox.layers.{i}.mlp.dense_h_to_4h", "output"),
    "blocks.{i}.mlp.post": ("gpt_neox.layers.{i}.mlp.dense_4h_to_h", "input[0]"),
    "blocks.{i}.mlp.out": ("gpt_neox.layers.{i}.mlp", "output"),
    "blocks.{i}.resid_post": ("gpt_neox.layers.{i}", "output"),
    "final_norm.out": ("gpt_neox.final_layer_norm", "output"),
    "logits": ("lm_head", "output"),  # stored as `embed_out.weight` in checkpoints, renamed on load
}

_OPT: dict[str, Source] = {
    "embed.tokens": ("model.decoder.embed_tokens", "output"),
    "embed.positions": ("model.decoder.embed_positions", "output"),
    "embed.out": ("model.decoder.layers.0", "input[0]"),  # tokens + positions are added inline
    "blocks.{i}.ln1.out": ("model.decoder.layers.{i}.self_attn_layer_norm", "output"),
    "blocks.{i}.attn.q": ("model.decoder.layers.{i}.self_attn.q_proj", "output"),  # before OPT scales it
    "blocks.{i}.attn.k": ("model.decoder.layers.{i}.self_attn.k_proj", "output"),
    "blocks.{i}.attn.v": ("model.decoder.layers.{i}.self_attn.v_proj", "output"),
    "blocks.{i}.attn.mask": ("model.decoder.layers.{i}.self_attn", "kwarg:attention_mask"),
    "blocks.{i}.attn.weights": ("model.decoder.layers.{i}.self_attn", "output[1]"),
    "blocks.{i}.attn.z": ("model.decoder.layers.{i}.self_attn.out_proj", "input[0]"),
    "blocks.{i}.attn.out": ("model.decoder.layers.{i}.self_attn", "output"),
    "blocks.{i}.resid_mid": ("model.decoder.layers.{i}.final_layer_norm", "input[0]"),
    "blocks.{i}.ln2.out": ("model.decoder.layers.{i}.final_layer_norm", "output"),
    "blocks.{i}.mlp.pre": ("model.decoder.layers.{i}.fc1", "output"),
    "blocks.{i}.mlp.post": ("model.decoder.layers.{i}.fc2", "input[0]"),
    "blocks.{i}.mlp.out": ("model.decoder.layers.{i}.fc2", "output"),
    "blocks.{i}.resid_post": ("model.decoder.layers.{i}", "output"),
    "final_norm.out": ("model.decoder.final_layer_norm", "output"),
    "logits": ("lm_head", "output"),
}

def _bert_like(base: str, head: dict[str, Source]) -> dict[str, Source]:
    """BERT / RoBERTa (post-norm): the *ForMaskedLM module tree; `head` holds the MLM head's entries."""
    layer = f"{base}.encoder.layer.{{i}}"
    names: dict[str, Source] = {
        "embed.tokens": (f"{base}.embeddings.word_embeddings", "output"),
        "embed.token_types": (f"{base}.embeddings.token_type_embeddings", "output"),  # added before positions
        "embed.positions": (f"{base}.embeddings.position_embeddings", "output"),
        "embed.out": (f"{base}.embeddings", "output"),  # LayerNorm(tokens + types + positions), dropout off
        "blocks.{i}.attn.q": (f"{layer}.attention.self.query", "output"),
        "blocks.{i}.attn.k": (f"{layer}.attention.self.key", "output"),
        "blocks.{i}.attn.v": (f"{layer}.attention.self.value", "output"),
        "blocks.{i}.attn.mask": (f"{layer}.attention.self", "kwarg:attention_mask"),
        "blocks.{i}.attn.weights": (f"{layer}.attention.self", "output[1]"),
        "blocks.{i}.attn.z": (f"{layer}.attention.output.dense", "input[0]"),
        "blocks.{i}.attn.out": (f"{layer}.attention.output.dense", "output"),  # before residual and LayerNorm
        "blocks.{i}.resid_mid": (f"{layer}.attention.output.LayerNorm", "input[0]"),
        "blocks.{i}.ln1.out": (f"{layer}.attention.output.LayerNorm", "output"),
        "blocks.{i}.mlp.pre": (f"{layer}.intermediate.dense", "output"),
        "blocks.{i}.mlp.post": (f"{layer}.intermediate", "output"),
        "blocks.{i}.mlp.out": (f"{layer}.output.dense", "output"),  # before residual and LayerNorm
        "blocks.{i}.resid_post": (layer, "output"),  # = output.LayerNorm output = hidden_states[i+1]
    }
    return names | head


_BERT_HEAD: dict[str, Source] = {
    "head.dense": ("cls.predictions.transform.dense", "output"),
    "head.act": ("cls.predictions.transform.transform_act_fn", "output"),  # config.hidden_act
    "head.ln.out": ("cls.predictions.transform.LayerNorm", "output"),
    "logits": ("cls.predictions.decoder", "output"),  # tied to word_embeddings; bias = cls.predictions.bias
}

_ROBERTA_HEAD: dict[str, Source] = {
    "head.dense": ("lm_head.dense", "output"),
    "head.act": ("lm_head.layer_norm", "input[0]"),  # exact-erf gelu() as a function, whatever hidden_act says
    "head.ln.out": ("lm_head.layer_norm", "output"),
    "logits": ("lm_head.decoder", "output"),  # tied to word_embeddings; bias = lm_head.bias
}


def _t5() -> dict[str, Source]:
    """T5 v1.0 / v1.1 (pre-norm, RMS norm, relative position bias computed in block 0 and shared)."""
    names: dict[str, Source] = {}
    for stack in ("encoder", "decoder"):
        block = f"{stack}.block.{{i}}"
        attn = f"{block}.layer.0.SelfAttention"
        ff = f"{block}.layer.{2 if stack == 'decoder' else 1}"
        step = f"{stack}.blocks.{{i}}"
        names[f"{stack}.embed.tokens"] = (f"{stack}.embed_tokens", "output")
        names[f"{stack}.embed.out"] = (f"{stack}.block.0", "input[0]")  # no scale, no positions; dropout off
        names[f"{step}.ln1.out"] = (f"{block}.layer.0.layer_norm", "output")
        for part in ("q", "k", "v"):
            names[f"{step}.attn.{part}"] = (f"{attn}.{part}", "output")
        names[f"{step}.attn.position_bias"] = (attn, "output[1]")  # bias only; block 0's, passed on unchanged
        names[f"{step}.attn.mask"] = (attn, "kwarg:mask")
        names[f"{step}.attn.weights"] = (attn, "output[2]")
        names[f"{step}.attn.z"] = (f"{attn}.o", "input[0]")
        names[f"{step}.attn.out"] = (attn, "output")
        names[f"{step}.resid_mid"] = (f"{block}.layer.0", "output")
        if stack == "decoder":
            cross = f"{block}.layer.1.EncDecAttention"
            names[f"{step}.ln_cross.out"] = (f"{block}.layer.1.layer_norm", "output")
            for part in ("q", "k", "v"):  # k, v from encoder.final_norm.out
                names[f"{step}.cross_attn.{part}"] = (f"{cross}.{part}", "output")
            names[f"{step}.cross_attn.mask"] = (cross, "kwarg:mask")
            names[f"{step}.cross_attn.weights"] = (cross, "output[2]")
            names[f"{step}.cross_attn.z"] = (f"{cross}.o", "input[0]")
            names[f"{step}.cross_attn.out"] = (cross, "output")
            names[f"{step}.resid_cross"] = (f"{block}.layer.1", "output")
        names[f"{step}.ln2.out"] = (f"{ff}.layer_norm", "output")
        names[f"{step}.mlp.pre"] = (f"{ff}.DenseReluDense.act", "input[0]")  # wi (v1.0) or wi_0 (gated) output
        names[f"{step}.mlp.up"] = (f"{ff}.DenseReluDense.wi_1", "output")  # gated only (CONDITIONS)
        names[f"{step}.mlp.post"] = (f"{ff}.DenseReluDense.wo", "input[0]")
        names[f"{step}.mlp.out"] = (f"{ff}.DenseReluDense", "output")
        names[f"{step}.resid_post"] = (block, "output")
        names[f"{stack}.final_norm.out"] = (f"{stack}.final_layer_norm", "output")
    names["logits"] = ("lm_head", "output")  # input scaled by d_model**-0.5 when config.scale_decoder_outputs
    return names


def _bart() -> dict[str, Source]:
    """BART (post-norm, learned positions offset by 2, embedding LayerNorm, no final norm)."""
    names: dict[str, Source] = {}
    for stack in ("encoder", "decoder"):
        base = f"model.{stack}"
        layer = f"{base}.layers.{{i}}"
        step = f"{stack}.blocks.{{i}}"
        # no embed.tokens: embed_tokens already multiplies by sqrt(d_model) (scale_embedding), like gemma
        names[f"{stack}.embed.positions"] = (f"{base}.embed_positions", "output")
        names[f"{stack}.embed.out"] = (f"{base}.layernorm_embedding", "output")
        for part in ("q", "k", "v"):
            names[f"{step}.attn.{part}"] = (f"{layer}.self_attn.{part}_proj", "output")
        names[f"{step}.attn.mask"] = (f"{layer}.self_attn", "kwarg:attention_mask")
        names[f"{step}.attn.weights"] = (f"{layer}.self_attn", "output[1]")
        names[f"{step}.attn.z"] = (f"{layer}.self_attn.out_proj", "input[0]")
        names[f"{step}.attn.out"] = (f"{layer}.self_attn", "output")
        names[f"{step}.resid_mid"] = (f"{layer}.self_attn_layer_norm", "input[0]")
        names[f"{step}.ln1.out"] = (f"{layer}.self_attn_layer_norm", "output")
        if stack == "decoder":
            cross = f"{layer}.encoder_attn"
            for part in ("q", "k", "v"):  # k, v from the last encoder block's output
                names[f"{step}.cross_attn.{part}"] = (f"{cross}.{part}_proj", "output")
            names[f"{step}.cross_attn.mask"] = (cross, "kwarg:attention_mask")
            names[f"{step}.cross_attn.weights"] = (cross, "output[1]")
            names[f"{step}.cross_attn.z"] = (f"{cross}.out_proj", "input[0]")
            names[f"{step}.cross_attn.out"] = (cross, "output")
            names[f"{step}.resid_cross"] = (f"{layer}.encoder_attn_layer_norm", "input[0]")
            names[f"{step}.ln_cross.out"] = (f"{layer}.encoder_attn_layer_norm", "output")
        names[f"{step}.mlp.pre"] = (f"{layer}.fc1", "output")
        names[f"{step}.mlp.post"] = (f"{layer}.fc2", "input[0]")
        names[f"{step}.mlp.out"] = (f"{layer}.fc2", "output")
        names[f"{step}.resid_post"] = (layer, "output")
    names["logits"] = ("lm_head", "output")  # final_logits_bias is added after lm_head
    return names


BASE_NAMES: dict[str, dict[str, Source]] = {
    "gpt2": _GPT2,
    "llama": llama_like(),
    "mistral": llama_like(),
    "qwen2": llama_like(),
    "gemma": llama_like(embed_tokens=False),
    "phi3": llama_like(fused_qkv=True, fused_gate_up=True),
    "gpt_neox": _GPT_NEOX,
    "opt": _OPT,
    "bert": _bert_like("bert", _BERT_HEAD),
    "roberta": _bert_like("roberta", _ROBERTA_HEAD),
    "t5": _t5(),
    "bart": _bart(),
}
