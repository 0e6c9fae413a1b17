"""GGUF tables of Gemma (gemma, gemma2, gemma3 -> gemma3_text).

The gemma converters store every RMSNorm weight plus one (transformers computes x * (1 + w), ggml x * w):
1 is subtracted back from each `*norm.weight`. What the file does not record is taken as llama.cpp takes it:
query scaling 1/sqrt(head_dim) (1/sqrt(d_model / heads) for the 27B shapes: 46 layers for gemma2, 62 for
gemma3) instead of query_pre_attn_scalar; sliding layers from `attention.sliding_window_pattern`, else every
other layer (gemma2) or five of every six (gemma3); gemma3's sliding layers rotate with rope.freq_base_swa."""

from __future__ import annotations

from tracer.arch.gguf_config import GGUFFamily, key, layer_flags


def _norm_minus_one(hf_name: str, cfg: dict):
    return (lambda a: a - 1.0) if hf_name.endswith("norm.weight") else None


def _gemma_config(f, cfg: dict) -> dict:
    cfg["hidden_activation"] = "gelu_pytorch_tanh"
    cfg["hidden_act"] = "gelu_pytorch_tanh"
    return cfg


def _sliding_layers(f, cfg: dict, period: int) -> list[str]:
    """llama.cpp's set_swa_pattern(n): layer il slides when il % n < n - 1, unless the file lists them."""
    n_layers = cfg["num_hidden_layers"]
    flags = layer_flags(f, "attention.sliding_window_pattern")
    if flags is None:
        n = key(f, "attention.sliding_window_pattern", period)
        flags = [n == 0 or i % n < n - 1 for i in range(n_layers)]
    return ["sliding_attention" if s else "full_attention" for s in flags]


def _llamacpp_scalar(cfg: dict, big_layers: int) -> float:
    d_head = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return cfg["hidden_size"] / cfg["num_attention_heads"] if cfg["num_hidden_layers"] == big_layers else float(d_head)


def _gemma2_config(f, cfg: dict) -> dict:
    _gemma_config(f, cfg)
    cfg["query_pre_attn_scalar"] = _llamacpp_scalar(cfg, 46)
    cfg.setdefault("sliding_window", 4096)  # llama.cpp's gemma2 default
    cfg["layer_types"] = _sliding_layers(f, cfg, 2)
    return cfg


def _gemma3_config(f, cfg: dict) -> dict:
    _gemma_config(f, cfg)
    cfg["query_pre_attn_scalar"] = _llamacpp_scalar(cfg, 62)
    full = dict(cfg.pop("rope_parameters"))
    local = {"rope_type": "default", "rope_theta": float(key(f, "rope.freq_base_swa", 10000.0))}
    cfg["rope_parameters"] = {"full_attention": full, "sliding_attention": local}
    if cfg.get("sliding_window"):
        cfg["layer_types"] = _sliding_layers(f, cfg, 6)
    else:
        cfg["layer_types"] = ["full_attention"] * cfg["num_hidden_layers"]
    return cfg


GGUF = {
    "gemma": GGUFFamily("gemma", _gemma_config, _norm_minus_one),
    "gemma2": GGUFFamily("gemma2", _gemma2_config, _norm_minus_one),
    "gemma3": GGUFFamily("gemma3_text", _gemma3_config, _norm_minus_one),
}
