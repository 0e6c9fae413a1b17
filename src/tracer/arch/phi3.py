"""Phi-3: Llama-like with fused qkv_proj = [q; k; v] and gate_up_proj = [gate; up]."""

from tracer.arch.canonical import rows_transposed
from tracer.arch.llama import IGNORED, llama_spec, llama_weights  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.windows import every_layer


def spec_from_config(cfg: dict):
    return llama_spec(cfg, "phi3", sliding_window=every_layer(cfg, "phi3"))


def weight_sources(spec):
    src = llama_weights(spec)
    q, kv, f = spec.n_heads * spec.d_head, spec.n_kv_heads * spec.d_head, spec.d_ff
    for i in range(spec.n_layers):
        hf, p = f"model.layers.{i}.", f"blocks.{i}."
        qkv = hf + "self_attn.qkv_proj.weight"
        src[p + "attn.W_q"] = rows_transposed(qkv, 0, q)
        src[p + "attn.W_k"] = rows_transposed(qkv, q, q + kv)
        src[p + "attn.W_v"] = rows_transposed(qkv, q + kv, q + 2 * kv)
        gate_up = hf + "mlp.gate_up_proj.weight"
        src[p + "mlp.W_in"] = rows_transposed(gate_up, 0, f)
        src[p + "mlp.W_up"] = rows_transposed(gate_up, f, 2 * f)
    return src
