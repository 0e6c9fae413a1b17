"""Qwen2-MoE (Qwen1.5-MoE): Qwen2 (q/k/v biases) whose MoE layers add to the routed experts a shared expert
every token goes through, scaled by sigmoid(x @ shared_expert_gate): out = routed + gate * shared.
Which layers are MoE: `mlp_only_layers` and `decoder_sparse_step`, as qwen3_moe (dense layers: intermediate_size)."""

from tracer.arch.canonical import transposed
from tracer.arch.llama import IGNORED, llama_spec, llama_weights  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.qwen3_moe import qwen_moe, qwen_moe_weights
from tracer.arch.windows import qwen2_moe_windows
from tracer.checkpoint.config import cfg_bool, cfg_size

FAMILY = "qwen2_moe"


def layer_windows(cfg: dict) -> tuple[int | None, ...]:
    """Per layer: the window or None (`layer_types`, else transformers 5's default: even-numbered layers
    below max_window_layers slide when use_sliding_window)."""
    return qwen2_moe_windows(cfg, FAMILY)


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
