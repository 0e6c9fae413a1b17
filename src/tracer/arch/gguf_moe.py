"""GGUF tables of the Qwen MoE families (qwen2moe -> qwen2_moe, qwen3moe -> qwen3_moe).

The converter stacks each layer's experts into ffn_{gate,up,down}_exps [n_expert, ...] (NumPy order); each
HF expert tensor is one slice, dequantized alone. Which layers are sparse is read from the tensors (a router
`ffn_gate_inp` in the block). llama.cpp's qwen3moe always renormalises the top-k weights (norm_w = true in
its graph) and qwen2moe never does: the config says so, whatever the source config's norm_topk_prob was."""

from __future__ import annotations

from tracer.arch.gguf_config import GGUFFamily, key

_EXPERTS = tuple(f"model.layers.{{i}}.mlp.experts.{{e}}.{w}_proj.weight" for w in ("gate", "up", "down"))


def _moe_config(f, cfg: dict, normalize: bool) -> dict:
    n_layers = cfg["num_hidden_layers"]
    cfg.update(hidden_act="silu", num_experts=key(f, "expert_count"), num_experts_per_tok=key(f, "expert_used_count"),
               moe_intermediate_size=key(f, "expert_feed_forward_length"), decoder_sparse_step=1,
               mlp_only_layers=[i for i in range(n_layers) if f"blk.{i}.ffn_gate_inp.weight" not in f.tensors],
               norm_topk_prob=bool(key(f, "expert_weights_norm", normalize)))
    shared = key(f, "expert_shared_feed_forward_length")
    if shared is not None:
        cfg["shared_expert_intermediate_size"] = shared
    return cfg


GGUF = {
    "qwen2moe": GGUFFamily("qwen2_moe", lambda f, cfg: _moe_config(f, cfg, False), experts=_EXPERTS),
    "qwen3moe": GGUFFamily("qwen3_moe", lambda f, cfg: _moe_config(f, cfg, True), experts=_EXPERTS),
}
