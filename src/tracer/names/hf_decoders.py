"""Where the steps of issue 10's decoder families live in transformers (see tracer.names.hf for the conventions).

qwen3 and gemma3 add q/k norms, olmo2 and gemma2/3 norms after each sublayer, gemma2/3 capped logits,
starcoder2 and phi plain MLPs (phi q/k LayerNorms with qk_layernorm), mixtral and qwen2/3_moe a router in
place of the MLP (qwen2_moe a shared expert beside it; qwen2/3_moe keep the MLP on their dense layers);
OPT-350m projects its embeddings in and out. Pure data for tracer.names.hf, which assembles the tables;
nothing here changes another module's tables, and no torch.
"""

from __future__ import annotations

from tracer.arch.qwen3_moe import sparse_layers
from tracer.names.hf_base import Source, llama_like


def _with_qk_norm(names: dict[str, Source]) -> dict[str, Source]:
    """Add attn.q_norm / attn.k_norm (modules self_attn.q_norm / k_norm) right after attn.v."""
    out: dict[str, Source] = {}
    for template, source in names.items():
        out[template] = source
        if template == "blocks.{i}.attn.v":
            out["blocks.{i}.attn.q_norm"] = ("model.layers.{i}.self_attn.q_norm", "output")
            out["blocks.{i}.attn.k_norm"] = ("model.layers.{i}.self_attn.k_norm", "output")
    return out


def _sublayer_norms(names: dict[str, Source], sandwich: bool) -> dict[str, Source]:
    """Gemma-2/3 (sandwich: input_layernorm, post_attention_layernorm, pre_ and post_feedforward_layernorm)
    or OLMo-2 (post_attention_layernorm and post_feedforward_layernorm only)."""
    layer = "model.layers.{i}"
    out: dict[str, Source] = {}
    for template, source in names.items():
        if template in ("blocks.{i}.ln1.out", "blocks.{i}.ln2.out", "blocks.{i}.resid_mid"):
            continue
        if template == "blocks.{i}.resid_post":
            out["blocks.{i}.ln2_post.out"] = (f"{layer}.post_feedforward_layernorm", "output")
        if template == "blocks.{i}.mlp.pre":
            out["blocks.{i}.resid_mid"] = ((f"{layer}.pre_feedforward_layernorm", "input[0]") if sandwich
                                           else (f"{layer}.mlp", "input[0]"))
            if sandwich:
                out["blocks.{i}.ln2.out"] = (f"{layer}.pre_feedforward_layernorm", "output")
        if template == "blocks.{i}.attn.q" and sandwich:
            out["blocks.{i}.ln1.out"] = (f"{layer}.input_layernorm", "output")
        out[template] = source
        if template == "blocks.{i}.attn.out":
            out["blocks.{i}.ln1_post.out"] = (f"{layer}.post_attention_layernorm", "output")
    return out


def _plain_mlp(names: dict[str, Source], fc: str, proj: str) -> dict[str, Source]:
    """A non-gated MLP: mlp.pre from the first projection, mlp.post into the second, no mlp.up."""
    out = {t: s for t, s in names.items() if t != "blocks.{i}.mlp.up"}
    out["blocks.{i}.mlp.pre"] = (f"model.layers.{{i}}.mlp.{fc}", "output")
    out["blocks.{i}.mlp.post"] = (f"model.layers.{{i}}.mlp.{proj}", "input[0]")
    return out


def _phi() -> dict[str, Source]:
    """Parallel block, one shared input_layernorm, output projection `dense`, final_layernorm."""
    names = _plain_mlp(llama_like(), "fc1", "fc2")
    for template in ("blocks.{i}.resid_mid", "blocks.{i}.ln2.out"):
        del names[template]
    names["blocks.{i}.attn.z"] = ("model.layers.{i}.self_attn.dense", "input[0]")
    names["final_norm.out"] = ("model.final_layernorm", "output")
    return names


def _logits_softcapped(names: dict[str, Source]) -> dict[str, Source]:
    """lm_head's output is logits.raw; transformers' `logits` output (capped) becomes logits."""
    out = {t: s for t, s in names.items() if t != "logits"}
    out["logits.raw"] = ("lm_head", "output")
    return out


_DENSE_MLP = ("blocks.{i}.mlp.pre", "blocks.{i}.mlp.up", "blocks.{i}.mlp.post")


def _moe(names: dict[str, Source], dense_layers: bool = False, shared: bool = False) -> dict[str, Source]:
    """The MLP replaced by a router (`mlp.gate`: logits, weights, experts) and experts; mlp.out is the block's.
    dense_layers: keep the dense MLP's steps for the layers without experts (qwen2/3_moe, see _by_layer);
    shared: qwen2_moe's shared expert and its gate, after the router steps."""
    layer = "model.layers.{i}.mlp"
    out: dict[str, Source] = {}
    for template, source in names.items():
        if template in _DENSE_MLP and not dense_layers:
            continue
        if template == "blocks.{i}.mlp.out":
            out["blocks.{i}.mlp.router.logits"] = (f"{layer}.gate", "output")
            out["blocks.{i}.mlp.router.experts"] = (f"{layer}.gate", "output[2]")
            out["blocks.{i}.mlp.router.weights"] = (f"{layer}.gate", "output[1]")
            if shared:
                out["blocks.{i}.mlp.shared.out"] = (f"{layer}.shared_expert", "output")
                out["blocks.{i}.mlp.shared.gate"] = (f"{layer}.shared_expert_gate", "sigmoid(output)")
        out[template] = source
    return out


def _moe_layer(config, i: int) -> bool:
    """Qwen2/3-MoE: layer i has experts (the adapter's rule, the one transformers applies)."""
    return sparse_layers(config.to_dict(), config.model_type)[i]


def _dense_layer(config, i: int) -> bool:
    return not _moe_layer(config, i)


def _by_layer(family: str, names: dict[str, Source]) -> dict[tuple[str, str], object]:
    """Router and shared-expert steps on the layers with experts, the dense MLP's steps on the others."""
    return {(family, t): _dense_layer if t in _DENSE_MLP else _moe_layer
            for t in names if t.startswith("blocks.{i}.mlp.") and t != "blocks.{i}.mlp.out"}


def _with_qk_layernorm(names: dict[str, Source]) -> dict[str, Source]:
    """phi with qk_layernorm: self_attn.q_layernorm / k_layernorm, applied after the head split (heads first)."""
    out = _with_qk_norm(names)
    out["blocks.{i}.attn.q_norm"] = ("model.layers.{i}.self_attn.q_layernorm", "output")
    out["blocks.{i}.attn.k_norm"] = ("model.layers.{i}.self_attn.k_layernorm", "output")
    return out


DECODER_NAMES: dict[str, dict[str, Source]] = {
    "mixtral": _moe(llama_like()),
    "qwen3_moe": _moe(_with_qk_norm(llama_like()), dense_layers=True),
    "qwen2_moe": _moe(llama_like(), dense_layers=True, shared=True),
    "qwen3": _with_qk_norm(llama_like()),
    "olmo2": _with_qk_norm(_sublayer_norms(llama_like(), sandwich=False)),
    "starcoder2": _plain_mlp(llama_like(), "c_fc", "c_proj"),
    "phi": _with_qk_layernorm(_phi()),
    "gemma2": _logits_softcapped(_sublayer_norms(llama_like(embed_tokens=False), sandwich=True)),
    "gemma3_text": _logits_softcapped(_with_qk_norm(_sublayer_norms(llama_like(embed_tokens=False), sandwich=True))),
}

DECODER_CONDITIONS: dict[tuple[str, str], object] = {("phi", "blocks.{i}.attn.q_norm"): ("qk_layernorm", True),
                                                     ("phi", "blocks.{i}.attn.k_norm"): ("qk_layernorm", True)}
DECODER_LAYER_CONDITIONS: dict[tuple[str, str], object] = {
    **_by_layer("qwen3_moe", DECODER_NAMES["qwen3_moe"]), **_by_layer("qwen2_moe", DECODER_NAMES["qwen2_moe"])}
# norms applied after the head split: the module's output is already [batch, heads, pos, d_head]
DECODER_HEADS_FIRST: frozenset[tuple[str, str]] = frozenset({
    ("gemma3_text", "blocks.{i}.attn.q_norm"), ("gemma3_text", "blocks.{i}.attn.k_norm"),
    ("phi", "blocks.{i}.attn.q_norm"), ("phi", "blocks.{i}.attn.k_norm")})


def _opt_final_norm(config) -> bool:
    return bool(getattr(config, "do_layer_norm_before", True)) and not getattr(config, "_remove_final_layer_norm", False)


def _opt_projects(config) -> bool:
    """OPT-350m: word_embed_proj_dim != hidden_size, so project_in / project_out exist."""
    return getattr(config, "word_embed_proj_dim", None) not in (None, config.hidden_size)


def opt_with_projections(opt: dict[str, Source]) -> dict[str, Source]:
    """OPT's table with OPT-350m's project_in (after embed.tokens) and project_out (before logits)."""
    out: dict[str, Source] = {}
    for template, source in opt.items():
        if template == "logits":
            out["project_out"] = ("model.decoder.project_out", "output")
        out[template] = source
        if template == "embed.tokens":
            out["embed.project_in"] = ("model.decoder.project_in", "output")
    return out


def opt_order(names: dict[str, Source], config) -> dict[str, Source]:
    """The same table in this config's execution order: a post-norm OPT (OPT-350m) norms after attention,
    so ln1.out (self_attn_layer_norm) comes after attn.out rather than before attn.q."""
    if getattr(config, "do_layer_norm_before", True):
        return names
    out = {t: s for t, s in names.items() if t != "blocks.{i}.ln1.out"}
    ordered: dict[str, Source] = {}
    for template, source in out.items():
        ordered[template] = source
        if template == "blocks.{i}.attn.out":
            ordered["blocks.{i}.ln1.out"] = names["blocks.{i}.ln1.out"]
    return ordered


# family -> (table, config) -> the table in that config's execution order, where the config changes it
ORDER_BY_CONFIG = {"opt": opt_order}

OPT_CONDITIONS: dict[tuple[str, str], object] = {
    ("opt", "final_norm.out"): _opt_final_norm,
    # post-norm: final_layer_norm reads resid_mid's output + mlp.out, not resid_mid
    ("opt", "blocks.{i}.resid_mid"): ("do_layer_norm_before", True),
    ("opt", "blocks.{i}.ln2.out"): ("do_layer_norm_before", True),  # post-norm: that is resid_post
    ("opt", "embed.project_in"): _opt_projects,
    ("opt", "project_out"): _opt_projects,
}
