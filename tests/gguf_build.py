"""Test-side GGUF writer: a committed fixture folder -> the GGUF file convert_hf_to_gguf.py would write for it
(no torch, no llama.cpp). Reads the safetensors with tracer's own reader and applies the converter's
transforms as written in llama.cpp's conversion/*.py (0.3.36 vendored tree), independently of tracer's
reading code: llama's q/k row permutation, gemma's norm + 1, GPT-2's Conv1D transposes, stacked experts,
llama3's rope_freqs, the metadata keys each converter writes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q

from tracer.checkpoint.weights import WeightFiles

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "models"

# fixture folder -> (GGUF architecture, what the converter's class does)
ARCHS = {
    "llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen2_moe": "qwen2moe",
    "qwen3_moe": "qwen3moe", "gemma": "gemma", "gemma2": "gemma2", "gemma3_text": "gemma3", "phi3": "phi3",
    "gpt2": "gpt2", "starcoder2": "starcoder2", "olmo2": "olmo2", "mixtral": "llama",
}
PERMUTED = ("llama",)  # LlamaModel.undo_permute (Olmo2Model, Qwen2Model, ... are TextModel: no permute)
NORM_PLUS_ONE = ("gemma", "gemma2", "gemma3")


def converter_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """LlamaModel.permute, on NumPy."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(rp: dict, dim: int) -> np.ndarray:
    """LlamaModel.generate_extra_tensors, in float32."""
    base = rp.get("rope_theta", 10000.0)
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, low, high = rp.get("factor", 8.0), rp.get("low_freq_factor", 1.0), rp.get("high_freq_factor", 4.0)
    old = rp.get("original_max_position_embeddings", 8192)
    low_wl, high_wl = old / low, old / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wl:
            out.append(1)
        elif wavelen > low_wl:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def converted_tensors(folder: Path, cfg: dict, arch: str) -> dict[str, np.ndarray]:
    """GGUF name -> float32 array (NumPy order), as the converter would produce before quantizing."""
    files = WeightFiles(folder)
    n_layers = cfg.get("num_hidden_layers") or cfg.get("n_layer")
    names = gguf.get_tensor_name_map(next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch), n_layers)
    llama_names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layers)  # a dense block in a MoE fixture
    out: dict[str, np.ndarray] = {}
    experts: dict[tuple[int, str], dict[int, np.ndarray]] = {}
    n_head, n_kv = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads", cfg.get("num_attention_heads"))
    for hf in files.names():
        a = np.array(files.get(hf), dtype=np.float32)
        if arch in ("gemma", "gemma2") and hf == "lm_head.weight":
            continue
        if ".mlp.experts." in hf or ".block_sparse_moe.experts." in hf:  # Qwen2MoeModel, LlamaModel: stacked
            parts = hf.split(".")
            layer, e, w = int(parts[2]), int(parts[5]), parts[6]
            experts.setdefault((layer, w), {})[e] = a
            continue
        if arch in PERMUTED and hf.endswith(("q_proj.weight", "q_proj.bias")):
            a = converter_permute(a, n_head)
        if arch in PERMUTED and hf.endswith(("k_proj.weight", "k_proj.bias")):
            a = converter_permute(a, n_kv)
        if arch in NORM_PLUS_ONE and hf.endswith("norm.weight"):
            a = a + 1
        if arch == "gpt2" and hf.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            a = np.ascontiguousarray(a.T)
        name = names.get_name(hf, try_suffixes=(".weight", ".bias")) or llama_names.get_name(hf, try_suffixes=(".weight", ".bias"))
        assert name is not None, f"no GGUF name for {hf}"
        out[name] = a
    for (layer, w), by_e in sorted(experts.items()):
        part = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down", "w1": "gate", "w3": "up", "w2": "down"}[w]
        out[f"blk.{layer}.ffn_{part}_exps.weight"] = np.stack([by_e[e] for e in sorted(by_e)])
    rp = cfg.get("rope_parameters") or {}
    if arch == "phi3" and rp.get("long_factor"):  # Phi3MiniModel.generate_extra_tensors
        out["rope_factors_long.weight"] = np.asarray(rp["long_factor"], dtype=np.float32)
        out["rope_factors_short.weight"] = np.asarray(rp["short_factor"], dtype=np.float32)
    if arch == "llama" and rp.get("rope_type") == "llama3":
        out["rope_freqs.weight"] = llama3_rope_factors(rp, cfg.get("head_dim") or cfg["hidden_size"] // n_head)
    return out


def write_metadata(w: gguf.GGUFWriter, cfg: dict, arch: str) -> None:
    """The keys TextModel.set_gguf_parameters and the family classes write."""
    if arch == "gpt2":  # GPT2Model.set_gguf_parameters
        w.add_block_count(cfg["n_layer"])
        w.add_context_length(cfg.get("n_ctx", cfg["n_positions"]))
        w.add_embedding_length(cfg["n_embd"])
        w.add_feed_forward_length(4 * cfg["n_embd"])  # whatever n_inner was
        w.add_head_count(cfg["n_head"])
        w.add_layer_norm_eps(cfg["layer_norm_epsilon"])
        return
    rp = cfg.get("rope_parameters") or {}
    full = rp.get("full_attention", rp)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    if full.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(full["factor"])
    w.add_rope_freq_base(full.get("rope_theta", 10000.0))
    if "sliding_attention" in rp:
        w.add_rope_freq_base_swa(rp["sliding_attention"]["rope_theta"])
    if "rms_norm_eps" in cfg:
        w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if "norm_epsilon" in cfg:
        w.add_layer_norm_eps(cfg["norm_epsilon"])
    n_exp = cfg.get("num_local_experts", cfg.get("num_experts"))
    if n_exp is not None:
        w.add_expert_count(n_exp)
        w.add_expert_used_count(cfg["num_experts_per_tok"])
    if cfg.get("head_dim") is not None:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    if arch == "llama":
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    if arch in ("qwen2moe", "qwen3moe"):
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        if cfg.get("shared_expert_intermediate_size") is not None:
            w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    if arch == "gemma2":
        w.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
        w.add_sliding_window(cfg["sliding_window"])
    if arch == "gemma3":
        if cfg.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
        if cfg.get("sliding_window_pattern") != 1:
            w.add_sliding_window(cfg["sliding_window"])
    if arch == "phi3":
        d_head = cfg["hidden_size"] // cfg["num_attention_heads"]
        w.add_rope_scaling_orig_ctx_len(full.get("original_max_position_embeddings",
                                                 cfg.get("original_max_position_embeddings", cfg["max_position_embeddings"])))
        w.add_rope_dimension_count(int(full.get("partial_rotary_factor", 1.0) * d_head))
        orig = full.get("original_max_position_embeddings", cfg.get("original_max_position_embeddings"))
        if full.get("long_factor"):
            scale = cfg["max_position_embeddings"] / orig
            w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)


def quantized(a: np.ndarray, qtype: Q) -> tuple[np.ndarray, Q]:
    """The tensor in `qtype` when it is a matrix whose rows fit the type's block (else float32, as the
    converter keeps 1-D norms, biases and rope factors)."""
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    if qtype == Q.F32 or a.ndim < 2 or a.shape[-1] % block:
        return a, Q.F32
    if qtype == Q.F16:
        return a.astype(np.float16), Q.F16
    return gguf.quants.quantize(a, qtype), qtype


def build_gguf(folder: Path, out: Path, qtype: Q = Q.F32, tokenizer: dict | None = None,
               tensors: dict[str, np.ndarray] | None = None) -> Path:
    """Write `out` from the fixture `folder`; `tensors` overrides the converted tensors (to break a file)."""
    cfg = json.loads((folder / "config.json").read_text())
    arch = ARCHS[folder.name]
    w = gguf.GGUFWriter(str(out), arch)
    write_metadata(w, cfg, arch)
    w.add_file_type(int({Q.F32: 0, Q.F16: 1, Q.BF16: 32, Q.Q8_0: 7, Q.Q4_0: 2, Q.Q4_1: 3, Q.Q5_0: 8,
                         Q.Q5_1: 9}.get(qtype, 0)))
    for k, v in (tokenizer or {}).items():
        if isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, list):
            w.add_array(k, v)
        elif isinstance(v, str):
            w.add_string(k, v)
        else:
            w.add_uint32(k, v)
    for name, a in (tensors if tensors is not None else converted_tensors(folder, cfg, arch)).items():
        data, t = quantized(a, qtype)
        if t in (Q.F32, Q.F16):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
