"""Qwen3-MoE: Qwen3 (per-head q/k norms) with a mixture of experts on the layers that have one
(`mlp_only_layers`, `decoder_sparse_step`; the others keep a dense MLP of `intermediate_size`); top-k
probabilities renormalised only with norm_topk_prob. qwen2_moe shares the routing fields (qwen_moe)."""

from tracer.arch.llama import IGNORED, llama_spec, llama_weights  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.mixtral import moe_weights
from tracer.arch.qwen3 import qk_norm_weights
from tracer.arch.spec import MoeSpec
from tracer.arch.windows import DEFAULT_WINDOW, every_layer
from tracer.checkpoint.config import cfg_bool, cfg_int, cfg_list, cfg_size
from tracer.errors import TracerError

FAMILY = "qwen3_moe"


def sparse_layers(cfg: dict, family: str = FAMILY) -> tuple[bool, ...]:
    """Per layer, as transformers decides: not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0."""
    n_layers = cfg_size(cfg, "num_hidden_layers", family, "layers")
    dense = cfg_list(cfg, "mlp_only_layers", family, default=None, nullable=True) or []
    for i in dense:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layers:
            raise TracerError(f"config.json ({family}): mlp_only_layers holds {i!r}, not a layer index in 0..{n_layers - 1}")
    step = cfg_int(cfg, "decoder_sparse_step", family, default=1)
    experts = cfg_int(cfg, ("num_experts", "num_local_experts"), family, minimum=0, maximum=1 << 16, default=0)
    return tuple(i not in dense and experts > 0 and (i + 1) % step == 0 for i in range(n_layers))


def qwen_moe(cfg: dict, family: str, d_shared: int = 0) -> MoeSpec | None:
    """The MoE of a Qwen-MoE config (None when no layer has experts: num_experts 0 or every layer dense)."""
    layers = sparse_layers(cfg, family)
    if not any(layers):
        return None
    n_experts = cfg_int(cfg, ("num_experts", "num_local_experts"), family, maximum=1 << 16)
    return MoeSpec(
        n_experts=n_experts,
        top_k=cfg_int(cfg, "num_experts_per_tok", family, maximum=n_experts),
        d_expert=cfg_size(cfg, "moe_intermediate_size", family, "d_ff"),
        normalize=cfg_bool(cfg, "norm_topk_prob", family, default=False),
        layers=layers,
        d_shared=d_shared,
    )


def spec_from_config(cfg: dict):
    # transformers' Qwen3MoeConfig has no layer_types: with use_sliding_window, every layer slides
    windows = every_layer(cfg, FAMILY, switch="use_sliding_window", absent=DEFAULT_WINDOW)
    return llama_spec(cfg, FAMILY, qk_norm="head", moe=qwen_moe(cfg, FAMILY), sliding_window=windows)


def qwen_moe_weights(spec, src: dict) -> dict:
    """Router and experts (`mlp.gate`, `mlp.experts.{e}.{gate,up,down}_proj`) in place of each MoE layer's MLP."""
    for i in range(spec.n_layers):
        if spec.moe is not None and spec.moe.on(i):
            hf = f"model.layers.{i}.mlp."
            moe_weights(spec, src, i, hf + "gate.weight", hf + "experts.{e}.{w}.weight",
                        ("gate_proj", "up_proj", "down_proj"))
    return src


def weight_sources(spec):
    return qwen_moe_weights(spec, qk_norm_weights(spec, llama_weights(spec)))
