"""GGUF table of GPT-2. The converter transposes the Conv1D weights (c_attn, c_proj, c_fc: stored [in, out]
by transformers) to ggml's [out, in]; they are transposed back. It writes feed_forward_length as 4 * n_embd
whatever n_inner was, and context_length from `n_ctx`: the sizes are read from the tensors instead."""

from __future__ import annotations

from tracer.arch.gguf_config import GGUFFamily


def _gpt2_config(f, cfg: dict) -> dict:
    cfg.update(n_embd=cfg.pop("hidden_size"), n_head=cfg.pop("num_attention_heads"), n_layer=cfg.pop("num_hidden_layers"),
               activation_function="gelu_new")
    cfg.pop("num_key_value_heads", None)
    cfg.pop("rope_parameters", None)
    cfg.pop("intermediate_size", None)
    pos = f.tensors.get("position_embd.weight")
    if pos is not None:
        cfg["n_positions"] = pos.shape[0]
    up = f.tensors.get("blk.0.ffn_up.weight")
    if up is not None:
        cfg["n_inner"] = up.shape[0]
    return cfg


GGUF = {"gpt2": GGUFFamily("gpt2", _gpt2_config, transposed=(".c_attn.weight", ".c_proj.weight", ".c_fc.weight"))}
