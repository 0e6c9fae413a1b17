"""Qwen3-MoE: Qwen3 (per-head q/k norms) with a mixture of experts on the layers that have one
(`mlp_only_layers`, `decoder_sparse_step`); top-k probabilities renormalised only with norm_topk_prob."""

from tracer.arch.llama import IGNORED, llama_spec, llama_weights  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.mixtral import moe_weights
from tracer.arch.qwen2 import layer_windows
from tracer.arch.qwen3 import qk_norm_weights
from tracer.arch.spec import MoeSpec
from tracer.checkpoint.config import cfg_bool, cfg_int, cfg_list, cfg_size

FAMILY = "qwen3_moe"


def sparse_layers(cfg: dict) -> tuple[bool, ...]:
    """Per layer, as transformers decides: not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0."""
    n_layers = cfg_size(cfg, "num_hidden_layers", FAMILY, "layers")
    dense = cfg_list(cfg, "mlp_only_layers", FAMILY, default=[])
    step = cfg_int(cfg, "decoder_sparse_step", FAMILY, default=1)
    experts = cfg_int(cfg, ("num_experts", "num_local_experts"), FAMILY, minimum=0, maximum=1 << 16, default=0)
    return tuple(i not in dense and experts > 0 and (i + 1) % step == 0 for i in range(n_layers))


def spec_from_config(cfg: dict):
    n_experts = cfg_int(cfg, ("num_experts", "num_local_experts"), FAMILY, maximum=1 << 16)
    moe = MoeSpec(
        n_experts=n_experts,
        top_k=cfg_int(cfg, "num_experts_per_tok", FAMILY, maximum=n_experts),
        d_expert=cfg_size(cfg, "moe_intermediate_size", FAMILY, "d_ff"),
        normalize=cfg_bool(cfg, "norm_topk_prob", FAMILY, default=False),
        layers=sparse_layers(cfg),
    )
    return llama_spec(cfg, FAMILY, qk_norm="head", moe=moe, sliding_window=layer_windows(cfg))


def weight_sources(spec):
    src = qk_norm_weights(spec, llama_weights(spec))
    for i in range(spec.n_layers):
        if spec.moe.on(i):
            hf = f"model.layers.{i}.mlp."
            moe_weights(spec, src, i, hf + "gate.weight", hf + "experts.{e}.{w}.weight",
                        ("gate_proj", "up_proj", "down_proj"))
    return src
