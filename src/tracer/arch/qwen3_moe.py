"""Qwen3-MoE: Qwen3 (per-head q/k norms) with a mixture of experts on the layers that have one
(`mlp_only_layers`, `decoder_sparse_step`); top-k probabilities renormalised only with norm_topk_prob."""

from tracer.arch.llama import llama_spec, llama_weights
from tracer.arch.mixtral import moe_weights
from tracer.arch.qwen2 import layer_windows
from tracer.arch.qwen3 import qk_norm_weights
from tracer.arch.spec import MoeSpec
from tracer.checkpoint.config import require


def sparse_layers(cfg: dict) -> tuple[bool, ...]:
    """Per layer, as transformers decides: not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0."""
    n_layers = int(cfg.get("num_hidden_layers", 0))
    dense = set(cfg.get("mlp_only_layers") or [])
    step = int(cfg.get("decoder_sparse_step") or 1)
    experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
    return tuple(i not in dense and experts > 0 and (i + 1) % step == 0 for i in range(n_layers))


def spec_from_config(cfg: dict):
    moe = MoeSpec(
        n_experts=int(require(cfg, "num_experts", "num_local_experts", family="qwen3_moe")),
        top_k=int(require(cfg, "num_experts_per_tok", family="qwen3_moe")),
        d_expert=int(require(cfg, "moe_intermediate_size", family="qwen3_moe")),
        normalize=bool(cfg.get("norm_topk_prob", False)),
        layers=sparse_layers(cfg),
    )
    return llama_spec(cfg, "qwen3_moe", qk_norm="head", moe=moe, sliding_window=layer_windows(cfg))


def weight_sources(spec):
    src = qk_norm_weights(spec, llama_weights(spec))
    for i in range(spec.n_layers):
        if spec.moe.on(i):
            hf = f"model.layers.{i}.mlp."
            moe_weights(spec, src, i, hf + "gate.weight", hf + "experts.{e}.{w}.weight",
                        ("gate_proj", "up_proj", "down_proj"))
    return src
