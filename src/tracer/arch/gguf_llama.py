"""GGUF tables of the Llama-layout families: llama (Mistral- and Mixtral-style files too), qwen2, qwen3,
olmo2, starcoder2, phi3.

What convert_hf_to_gguf.py changed, undone here: for `llama` only, the rows of attn_q / attn_k (weights and
biases) are permuted so ggml's interleaved rotary pairs (x0, x1) line up (`LlamaModel.permute`); qwen2, qwen3,
olmo2, starcoder2 and phi3 use ggml's NEOX rotary (the half-split layout) and are stored as transformers has
them. llama3 rope scaling becomes a `rope_freqs` tensor (read in gguf_config). Mixtral's experts are stacked
into ffn_{gate,up,down}_exps. The converter drops Mistral's and StarCoder2's `sliding_window` (llama.cpp runs
them with full attention) and Qwen2's sliding layers: so does tracer, reading the file as llama.cpp does."""

from __future__ import annotations

from tracer.arch.gguf_config import GGUFFamily, key, unpermute_rope_rows


def _has(f, name: str) -> bool:
    return name in f.tensors


def _llama_config(f, cfg: dict) -> dict:
    cfg["attention_bias"] = _has(f, "blk.0.attn_q.bias")
    cfg["mlp_bias"] = _has(f, "blk.0.ffn_gate.bias")
    cfg["hidden_act"] = "silu"
    if _has(f, "blk.0.ffn_gate_exps.weight"):  # a Mixtral-style file
        cfg.update(model_type="mixtral", num_local_experts=key(f, "expert_count"),
                   num_experts_per_tok=key(f, "expert_used_count"))
    return cfg


def _llama_undo(hf_name: str, cfg: dict):
    n_heads = cfg["num_attention_heads"]
    if hf_name.endswith(("q_proj.weight", "q_proj.bias")):
        return lambda a: unpermute_rope_rows(a, n_heads)
    if hf_name.endswith(("k_proj.weight", "k_proj.bias")):
        n_kv = cfg.get("num_key_value_heads", n_heads)
        return lambda a: unpermute_rope_rows(a, n_kv)
    return None


def _qwen_config(f, cfg: dict) -> dict:
    cfg["hidden_act"] = "silu"
    return cfg


def _starcoder2_config(f, cfg: dict) -> dict:
    cfg["norm_epsilon"] = cfg.pop("layer_norm_epsilon", 1e-5)
    cfg["use_bias"] = _has(f, "blk.0.attn_q.bias")
    cfg["hidden_act"] = "gelu_pytorch_tanh"  # llama.cpp's starcoder2 GELU (tanh form)
    cfg.pop("sliding_window", None)  # never written by the converter; llama.cpp applies none
    return cfg


def _phi3_config(f, cfg: dict) -> dict:
    cfg["hidden_act"] = "silu"
    original = key(f, "rope.scaling.original_context_length")
    if original:
        cfg["original_max_position_embeddings"] = original
    d_ff = f.tensors.get("blk.0.ffn_up.weight")
    if d_ff is not None:  # gate and up fused: [2 * d_ff, d_model]
        cfg["intermediate_size"] = d_ff.shape[0] // 2
    return cfg


GGUF = {
    "llama": GGUFFamily("llama", _llama_config, _llama_undo,
                        experts=("model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight",
                                 "model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight",
                                 "model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight")),
    "qwen2": GGUFFamily("qwen2", _qwen_config),
    "qwen3": GGUFFamily("qwen3", _qwen_config),
    "olmo2": GGUFFamily("olmo2", _qwen_config),
    "starcoder2": GGUFFamily("starcoder2", _starcoder2_config),
    "phi3": GGUFFamily("phi3", _phi3_config),
}
