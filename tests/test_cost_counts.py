"""tracer cost's arithmetic: hand-worked counts, the engine's own shapes, real parameter counts, the 2·N rule."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import conftest
from conftest import FAMILIES, MODELS, VARIANTS, model_dir
from fixture_tools import safetensors_float_parameters
from tracer.arch.registry import adapter_for
from tracer.arch.spec import RopeSpec, Spec
from tracer.checkpoint.config import read_config
from tracer.cost.counts import Pass, kept_pairs
from tracer.cost.routes import pass_costs
from tracer.cost.params import non_embedding_parameters, parameter_groups
from tracer.cost.summary import crossovers, kv_cache_bytes, passes_at, rule_2n
from tracer.engine.masks import causal_keep, window_keep


def tiny(**over) -> Spec:
    """d_model 4, 2 query heads sharing 1 kv head of width 2, gated MLP of 6, vocab 10, one layer."""
    fields = dict(family="llama", d_model=4, n_layers=1, n_heads=2, n_kv_heads=1, d_head=2, d_ff=6, vocab_size=10,
                  max_positions=None, norm="rmsnorm", norm_eps=1e-6, positions="rotary",
                  rope=RopeSpec(theta=10000.0, rotary_dim=2), mlp="gated", activation="silu")
    fields.update(over)
    return Spec(**fields)


def by_name(spec: Spec, p: Pass) -> dict:
    return {c.name: c for c in pass_costs(spec, p)}


def spec_of(folder: Path) -> Spec:
    cfg, _ = read_config(folder)
    return adapter_for(cfg).spec_from_config(cfg)


# ---------- hand-worked counts ----------

def test_prefill_of_three_tokens_by_hand():
    c = by_name(tiny(), Pass(batch=1, q_len=3))
    # q: [3, 4] @ [4, 2 heads * 2] = 3*4*4; k and v: [3, 4] @ [4, 1 kv head * 2] = 3*4*2
    assert (c["blocks.0.attn.q"].macs, c["blocks.0.attn.k"].macs, c["blocks.0.attn.v"].macs) == (48, 24, 24)
    # causal pairs of 3 positions: 1 + 2 + 3 = 6 per head; 2 heads, d_head 2 -> 24 MACs each for q.kT and weights.v
    assert c["blocks.0.attn.scores"].macs == 24 and c["blocks.0.attn.z"].macs == 24
    assert c["blocks.0.attn.scores"].elementwise == 12  # the scale, once per kept pair
    assert c["blocks.0.attn.weights"].elementwise == 12 * 5  # softmax: 5 per element
    assert c["blocks.0.attn.out"].macs == 3 * 4 * 4
    assert c["blocks.0.mlp.pre"].macs == c["blocks.0.mlp.up"].macs == c["blocks.0.mlp.out"].macs == 3 * 4 * 6
    assert c["blocks.0.mlp.post"].elementwise == 3 * 6 * (4 + 1)  # silu 4, times up 1
    assert c["blocks.0.attn.q_rot"].elementwise == 3 * 2 * 2 * 3  # positions * heads * rotary_dim * 3
    assert c["logits"].macs == 3 * 4 * 10
    assert c["blocks.0.attn.q"].flops == 96 and c["blocks.0.attn.q"].weight_bytes == 16 * 4
    assert c["blocks.0.attn.scores"].act_bytes == 12 * 4
    assert c["embed.tokens"].weight_bytes == 3 * 4 * 4  # three rows gathered, not the table


def test_a_sliding_window_caps_the_keys():
    c = by_name(tiny(sliding_window=(2,)), Pass(batch=1, q_len=3))
    assert c["blocks.0.attn.scores"].macs == 2 * (1 + 2 + 2) * 2  # row 3 sees only 2 keys
    d = by_name(tiny(sliding_window=(2,)), Pass(batch=1, q_len=1, past=100))
    assert d["blocks.0.attn.scores"].macs == 2 * 2 * 2  # a decoding step far out still sees 2 keys


def test_a_decoding_step_with_a_cache_by_hand():
    c = by_name(tiny(), Pass(batch=2, q_len=1, past=3))
    assert c["blocks.0.attn.q"].macs == 2 * 4 * 4  # two rows, one new position each
    assert c["blocks.0.attn.scores"].macs == 2 * 2 * 4 * 2  # batch * heads * 4 keys * d_head
    assert c["blocks.0.attn.q"].weight_bytes == 16 * 4  # the weights are read whole for a single token


def test_dense_counts_the_whole_square():
    assert by_name(tiny(), Pass(1, 3, dense=True))["blocks.0.attn.scores"].macs == 2 * 9 * 2


def test_biases_tied_heads_and_parallel_residual_by_hand():
    s = tiny(qkv_bias=True, o_bias=True, residual="parallel", norm="layernorm", mlp="plain", activation="relu",
             mlp_bias=True, tied_embeddings=True, positions="learned", rope=None, max_positions=16)
    c = by_name(s, Pass(1, 3))
    assert c["blocks.0.attn.q"].elementwise == 3 * 4  # the bias add
    assert c["blocks.0.resid_post"].elementwise == 3 * 4 * 2  # x + attn.out + mlp.out
    assert "blocks.0.resid_mid" not in c and "blocks.0.attn.q_rot" not in c and "embed.positions" in c
    assert c["blocks.0.ln1.out"].elementwise == 3 * 4 * 7 and c["blocks.0.ln1.out"].weight_bytes == 8 * 4
    g = parameter_groups(s)
    # attention: 4*4 + 2*4*2 + 4*4 weights, 4 + 2 + 2 q/k/v biases, 4 o bias
    assert g["attention"] == 16 + 16 + 16 + 8 + 4
    assert g["mlp"] == 2 * 4 * 6 + 6 + 4 and g["head"] == 0 and g["embeddings"] == 10 * 4 + 16 * 4
    assert g["norms"] == 3 * 8


def test_kept_pairs_equal_the_engines_masks():
    for q_len, past in ((1, 0), (5, 0), (1, 9), (4, 6), (7, 3)):
        kv = past + q_len
        for window in (None, 1, 2, 3, 8):
            keep = causal_keep(q_len, kv, past)
            if window is not None:
                keep &= window_keep(q_len, kv, window, past)
            assert kept_pairs(q_len, past, window) == int(keep.sum()), (q_len, past, window)
            i = np.arange(past, kv)[:, None]
            j = np.arange(kv)[None, :]
            both = np.abs(i - j) < window if window else np.ones((q_len, kv), bool)
            assert kept_pairs(q_len, past, window, causal=False) == int(both.sum()), (q_len, past, window)


# ---------- against real checkpoints and the engine ----------

ENCODERS = tuple(getattr(conftest, "ENCODERS", ()))  # the encoder and encoder-decoder fixtures, once there are any


@pytest.mark.parametrize("name", FAMILIES + VARIANTS + ENCODERS + ("../default-model",))
def test_parameter_groups_add_up_to_the_checkpoint(name):
    folder = MODELS / name
    cfg, _ = read_config(folder)
    total = safetensors_float_parameters(folder, getattr(adapter_for(cfg), "IGNORED", ()))
    assert total > 0
    assert sum(parameter_groups(spec_of(folder)).values()) == total


def test_known_parameter_counts():
    gpt2 = adapter_for({"model_type": "gpt2"}).spec_from_config(
        {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257})
    assert sum(parameter_groups(gpt2).values()) == 124_439_808  # GPT-2 small, as published
    assert non_embedding_parameters(gpt2) == 124_439_808 - 50257 * 768 - 1024 * 768
    llama = adapter_for({"model_type": "llama"}).spec_from_config(LLAMA2_7B)
    assert sum(parameter_groups(llama).values()) == 6_738_415_616  # Llama-2-7B


LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32,
             "num_hidden_layers": 32, "intermediate_size": 11008, "vocab_size": 32000, "rope_theta": 10000.0}


@pytest.mark.parametrize("name", FAMILIES + ("qwen3_moe-dense", "phi-qk"))
def test_counted_steps_are_the_engines_steps_with_its_shapes(name):
    """Every counted step is one the engine records, and writes exactly the bytes of the recorded array."""
    from tracer.model.model import load_model

    m = load_model(model_dir(name))
    trace = m.run(ids=[[5, 17, 42, 7, 9], [3, 4, 5, 6, 8]])
    recorded = {s.name: s for s in trace.steps}
    costs = pass_costs(m.spec, Pass(batch=2, q_len=5, itemsize=4, dense=True))
    assert [c.name for c in costs] == [n for n in recorded if not n.startswith("input.") and not n.endswith("attn.mask")]
    for c in costs:
        if c.act_bytes:  # embed.out of a rotary model is the token embeddings themselves: nothing written
            assert c.act_bytes == math.prod(recorded[c.name].shape) * 4, c.name


# ---------- the 2·N rule, the KV cache, the crossover ----------

@pytest.mark.parametrize("cfg", [
    {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257},
    LLAMA2_7B,
])
def test_two_n_rule(cfg):
    spec = adapter_for(cfg).spec_from_config(cfg)
    n = 1024
    r = rule_2n(spec, n, 4)
    g = parameter_groups(spec)
    # the blocks' products with weights are exactly 2 FLOPs per weight per token (biases and norms are adds)
    biases = (spec.n_heads + 2 * spec.n_kv_heads) * spec.d_head * spec.qkv_bias + spec.d_model * spec.o_bias
    biases += (spec.d_ff + spec.d_model) * spec.mlp_bias
    assert r["block_matmul_flops_per_token"] == 2 * (g["attention"] + g["mlp"] - spec.n_layers * biases)
    # attention's pairs: q.kT and weights.v, 2 FLOPs * heads * d_head per kept pair each, per layer
    pair_mm = 2 * 2 * spec.n_layers * spec.n_heads * spec.d_head * (n * (n + 1) // 2) / n
    assert pair_mm <= r["attention_pair_flops_per_token"] < 1.2 * pair_mm
    predicted = 2 * non_embedding_parameters(spec) + pair_mm + 2 * spec.d_model * spec.vocab_size
    assert abs(r["flops_per_token"] - predicted) / predicted < 0.02


def test_kv_cache_bytes_by_hand():
    mistral = spec_of(model_dir("mistral"))  # 2 layers, 2 kv heads of 8, window 3 on every layer
    assert kv_cache_bytes(mistral, 1, 1, 4) == 2 * (2 * 2 * 8) * 4  # layers * (k and v * kv heads * d_head) * bytes
    assert kv_cache_bytes(mistral, 3, 10, 2) == 3 * 2 * 3 * (2 * 2 * 8) * 2  # capped at 3 positions
    qwen2 = spec_of(model_dir("qwen2"))  # 3 layers, only the last windowed (3)
    assert kv_cache_bytes(qwen2, 1, 10, 4) == (10 + 10 + 3) * (2 * 2 * 8) * 4


def test_decoding_with_and_without_a_cache():
    spec = spec_of(model_dir("llama"))
    at = passes_at(spec, 20, 1, 4)
    assert at["decode_uncached"]["flops"] == passes_at(spec, 21, 1, 4)["prefill"]["flops"]
    assert at["decode_cached"]["flops"] < at["prefill"]["flops"] / 10
    assert at["decode_cached"]["kv_cache_read_bytes"] == kv_cache_bytes(spec, 1, 21, 4)


def test_crossover_by_hand():
    """Plain relu MLP, no biases, one layer: attention pairs cost h·P·(4·d_head + 7) FLOPs (q.kT 2·d_head,
    scale 1, mask 1, softmax 5, weights.v 2·d_head); the MLP n·(4·d·f + f)."""
    s = tiny(mlp="plain", activation="relu", n_kv_heads=2, d_ff=64)
    h, dh, d, f = 2, 2, 4, 64
    first = next(n for n in range(1, 10_000) if h * n * (n + 1) // 2 * (4 * dh + 7) > n * (4 * d * f + f))
    later = next(n for n in range(1, 10_000) if h * (n + 1) * (4 * dh + 7) > 4 * d * f + f)
    dense = next(n for n in range(1, 10_000) if h * n * n * (4 * dh + 7) > n * (4 * d * f + f))
    assert crossovers(s) == {"prefill": first, "prefill_dense": dense, "decode": later}
    assert crossovers(tiny(mlp="plain", activation="relu", d_ff=64, sliding_window=(2,)))["prefill"] is None



def test_crossover_with_mixed_windows_equals_counting_every_layer():
    from tracer.cost.summary import attention_pair_flops, mlp_flops

    qwen2 = spec_of(model_dir("qwen2"))  # full attention on two layers, a window of 3 on the third

    def wins(p):
        costs = pass_costs(qwen2, p)
        return attention_pair_flops(costs) > mlp_flops(costs)

    expected = next(n for n in range(1, 5000) if wins(Pass(1, n)))
    assert crossovers(qwen2)["prefill"] == expected
    assert crossovers(qwen2)["decode"] == next(n for n in range(1, 5000) if wins(Pass(1, 1, past=n)))
