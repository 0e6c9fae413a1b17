"""Qwen2-MoE (Qwen1.5-MoE): Qwen2 (q/k/v biases) whose MoE layers add to the routed experts a shared expert
every token goes through, scaled by sigmoid(x @ shared_expert_gate): out = routed + gate * shared.
Which layers are MoE: `mlp_only_layers` and `decoder_sparse_step`, as qwen3_moe (dense layers: intermediate_size)."""

from tracer.arch.canonical import transposed
from tracer.arch.llama import IGNORED, llama_spec, llama_weights, sliding_window  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.qwen2 import LAYER_TYPES
from tracer.arch.qwen3_moe import qwen_moe, qwen_moe_weights
from tracer.checkpoint.config import cfg_bool, cfg_int, cfg_list, cfg_size

FAMILY = "qwen2_moe"


def layer_windows(cfg: dict) -> tuple[int | None, ...]:
    """Per layer: the window or None (`layer_types`, else transformers 5's default: even-numbered layers
    below max_window_layers slide when use_sliding_window)."""
    n_layers = cfg_size(cfg, "num_hidden_layers", FAMILY, "layers")
    window = sliding_window(cfg, FAMILY) if cfg_bool(cfg, "use_sliding_window", FAMILY, default=False) else None
    types = cfg_list(cfg, "layer_types", FAMILY, length=n_layers, choices=LAYER_TYPES, default=None)
    if not types:
        below = cfg_int(cfg, "max_window_layers", FAMILY, minimum=0, default=28)
        types = ["sliding_attention" if window and (i + 1) % 2 and i < below else "full_attention" for i in range(n_layers)]
    return tuple(window if t == "sliding_attention" and window else None for t in types)


def spec_from_config(cfg: dict):
    d_shared = cfg_size(cfg, "shared_expert_intermediate_size", FAMILY, "d_ff")
    bias = cfg_bool(cfg, "qkv_bias", FAMILY, default=True)
    return llama_spec(cfg, FAMILY, qkv_bias=bias, o_bias=False, moe=qwen_moe(cfg, FAMILY, d_shared),
                      sliding_window=layer_windows(cfg))


def weight_sources(spec):
    src = qwen_moe_weights(spec, llama_weights(spec))
    for i in range(spec.n_layers):
        if spec.moe is not None and spec.moe.on(i):
            hf, p = f"model.layers.{i}.mlp.", f"blocks.{i}.mlp.shared."
            for ours, theirs in (("W_in", "gate_proj"), ("W_up", "up_proj"), ("W_out", "down_proj")):
                src[p + ours] = transposed(hf + f"shared_expert.{theirs}.weight")
            src[p + "W_gate"] = transposed(hf + "shared_expert_gate.weight")  # [d_model, 1]
    return src
