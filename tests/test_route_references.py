"""The committed encoder and encoder-decoder references say what transformers 5.24 computes, checked with NumPy.

No torch: each test recomputes one step of a reference from the fixture's weights
(and from other steps of the same reference) and so pins down a fact the engine
must follow: where the MLM bias lives, which activation RoBERTa's head uses,
how positions are derived, T5's bucketed bias and output scaling, BART's
final_logits_bias, the shape of the cross-attention mask, `pooled`.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from safetensors.numpy import load_file

from conftest import ENCODERS, SEQ2SEQ, model_dir
from tracer.trace import Trace

ATOL = 2e-5  # float32 recomputation in another summation order
REFERENCES = ("reference.safetensors", "reference_batch.safetensors")


def _load(name: str, filename: str = "reference.safetensors"):
    folder = model_dir(name)
    config = json.loads((folder / "config.json").read_text())
    return Trace.load(folder / filename), load_file(folder / "model.safetensors"), config


def _gelu_erf(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def _real(trace: Trace, name: str, mask_name: str = "input.mask"):
    """Rows of a [batch, pos, ...] step at real positions only, flattened over batch and pos."""
    return trace[name][trace[mask_name].astype(bool)]


# ---------- encoders ----------


@pytest.mark.parametrize("filename", REFERENCES + ("reference_batch_left.safetensors",))
def test_bert_pooled_is_normalised_mean_over_real_tokens(filename):
    trace, _, _ = _load("bert", filename)
    mask = trace["input.mask"][..., None].astype(np.float64)
    last = trace["blocks.1.resid_post"].astype(np.float64)
    mean = (last * mask).sum(1) / mask.sum(1)
    expected = mean / np.linalg.norm(mean, axis=-1, keepdims=True)
    np.testing.assert_allclose(trace["pooled"], expected, atol=1e-6)
    assert "logits" not in trace and "head.dense" not in trace


@pytest.mark.parametrize("filename", REFERENCES + ("reference_batch_left.safetensors",))
def test_bert_positions_count_from_zero_whatever_the_padding(filename):
    trace, weights, _ = _load("bert", filename)
    batch, pos = trace["input.ids"].shape
    assert (trace["input.positions"] == np.arange(pos)).all()  # left padding shifts the real tokens' positions
    np.testing.assert_array_equal(trace["embed.positions"], np.broadcast_to(weights["embeddings.position_embeddings.weight"][:pos], (batch, pos, 32)))
    np.testing.assert_array_equal(trace["embed.token_types"], weights["embeddings.token_type_embeddings.weight"][trace["input.token_types"]])


def test_bert_pair_marks_token_types():
    trace, _, _ = _load("bert", "reference_batch.safetensors")
    types = trace["input.token_types"]
    assert types[0].max() == 0 and types[1].max() == 1


@pytest.mark.parametrize("filename", REFERENCES)
def test_bert_mlm_head(filename):
    """head.act follows hidden_act (gelu_new here); logits use the tied word embeddings plus cls.predictions.bias."""
    trace, w, config = _load("bert-mlm", filename)
    assert config["hidden_act"] == "gelu_new" and config["architectures"] == ["BertForMaskedLM"]
    np.testing.assert_allclose(trace["head.act"], _gelu_tanh(trace["head.dense"].astype(np.float64)), atol=ATOL)
    assert np.abs(trace["head.act"] - _gelu_erf(trace["head.dense"].astype(np.float64))).max() > 1e-4
    expected = trace["head.ln.out"] @ w["bert.embeddings.word_embeddings.weight"].T + w["cls.predictions.bias"]
    np.testing.assert_allclose(trace["logits"], expected, atol=ATOL)


@pytest.mark.parametrize("filename", REFERENCES + ("reference_batch_left.safetensors",))
def test_roberta_positions_and_head(filename):
    """Positions from the non-pad ids (pads -1), offset by padding_idx + 1; the head's activation is exact gelu."""
    trace, w, config = _load("roberta", filename)
    ids, mask = trace["input.ids"], trace["input.mask"]
    real = (ids != config["pad_token_id"]).astype(np.int64)
    np.testing.assert_array_equal(real, mask)
    np.testing.assert_array_equal(trace["input.positions"], np.cumsum(real, 1) * real - 1)
    table = w["roberta.embeddings.position_embeddings.weight"]
    np.testing.assert_array_equal(trace["embed.positions"], table[trace["input.positions"] + config["pad_token_id"] + 1])
    assert config["hidden_act"] == "gelu_new"  # the blocks' activation; the head ignores it
    np.testing.assert_allclose(trace["head.act"], _gelu_erf(trace["head.dense"].astype(np.float64)), atol=ATOL)
    expected = trace["head.ln.out"] @ w["roberta.embeddings.word_embeddings.weight"].T + w["lm_head.bias"]
    np.testing.assert_allclose(trace["logits"], expected, atol=ATOL)


@pytest.mark.parametrize("name", ENCODERS)
def test_encoder_mask_keeps_real_keys_for_every_query_row(name):
    """Padding only: pad *query* rows still attend to the real tokens (no causal part)."""
    trace, _, _ = _load(name, "reference_batch_left.safetensors")
    keep, mask = trace["blocks.0.attn.mask"], trace["input.mask"].astype(bool)
    assert keep.shape == (2, 1) + mask.shape[1:] * 2
    np.testing.assert_array_equal(keep, np.broadcast_to(mask[:, None, None, :], keep.shape))


# ---------- encoder-decoders ----------


def _buckets(q_len: int, k_len: int, bidirectional: bool, num_buckets: int, max_distance: int) -> np.ndarray:
    """transformers' T5Attention._relative_position_bucket, in float32 as it runs there."""
    rel = np.arange(k_len)[None, :] - np.arange(q_len)[:, None]
    buckets = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0) * num_buckets
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    max_exact = num_buckets // 2
    safe = np.maximum(rel, 1).astype(np.float32)  # rel 0 takes the exact branch below anyway
    log = np.log(safe / np.float32(max_exact)) / np.float32(math.log(max_distance / max_exact))
    large = max_exact + (log * np.float32(num_buckets - max_exact)).astype(np.int64)
    return buckets + np.where(rel < max_exact, rel, np.minimum(large, num_buckets - 1))


@pytest.mark.parametrize("name", ("t5", "t5-gated"))
def test_t5_position_bias_is_bucketed_and_shared(name):
    trace, w, config = _load(name)
    for stack, bidirectional in (("encoder", True), ("decoder", False)):
        bias = trace[f"{stack}.blocks.0.attn.position_bias"]
        q, k = bias.shape[2:]
        buckets = _buckets(q, k, bidirectional, config["relative_attention_num_buckets"], config["relative_attention_max_distance"])
        table = w[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]  # [buckets, heads]
        np.testing.assert_array_equal(bias[0], table[buckets].transpose(2, 0, 1))
        n = config["num_layers"] if stack == "encoder" else config["num_decoder_layers"]
        for i in range(1, n):  # computed by block 0, passed on unchanged
            np.testing.assert_array_equal(trace[f"{stack}.blocks.{i}.attn.position_bias"], bias)
    # on 15 tokens the log-spaced buckets are reached on both sides (exact: 0, 1 and 4+1; log: 2, 3 and 6, 7)
    assert set(np.unique(_buckets(15, 15, True, 8, 16))) == {0, 1, 2, 3, 5, 6, 7}


def test_t5_scores_have_no_scale():
    trace, _, _ = _load("t5")
    q, k = trace["encoder.blocks.0.attn.q"], trace["encoder.blocks.0.attn.k"]
    scores = q @ k.transpose(0, 1, 3, 2) + trace["encoder.blocks.0.attn.position_bias"]
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(trace["encoder.blocks.0.attn.weights"], weights / weights.sum(-1, keepdims=True), atol=ATOL)


def test_t5_v10_logits_are_scaled_and_tied_v11_are_not():
    trace, w, config = _load("t5")
    assert config.get("scale_decoder_outputs", True) and "lm_head.weight" not in w
    expected = (trace["decoder.final_norm.out"] * config["d_model"] ** -0.5) @ w["shared.weight"].T
    np.testing.assert_allclose(trace["logits"], expected, atol=ATOL)
    trace, w, config = _load("t5-gated")
    assert config["tie_word_embeddings"] is False and not np.array_equal(w["lm_head.weight"], w["shared.weight"])
    np.testing.assert_allclose(trace["logits"], trace["decoder.final_norm.out"] @ w["lm_head.weight"].T, atol=ATOL)
    assert config["num_decoder_layers"] == 3 and "decoder.blocks.2.resid_post" in trace


def test_t5_float64_rms_norm_is_float64_throughout():
    trace, w, config = _load("t5", "reference64.safetensors")
    x = trace["encoder.embed.out"]
    expected = x / np.sqrt((x * x).mean(-1, keepdims=True) + config["layer_norm_epsilon"]) * w["encoder.block.0.layer.0.layer_norm.weight"]
    assert np.abs(trace["encoder.blocks.0.ln1.out"] - expected).max() < 1e-13


def test_bart_embeddings_and_logits():
    trace, w, config = _load("bart", "reference_batch.safetensors")
    ids, dec = trace["input.ids"], trace["input.decoder_ids"]
    table = w["model.encoder.embed_positions.weight"]
    np.testing.assert_array_equal(trace["encoder.embed.positions"], table[trace["input.positions"] + 2])
    x = w["model.shared.weight"][ids] * math.sqrt(config["d_model"]) + trace["encoder.embed.positions"]
    ln = _layer_norm(x, w["model.encoder.layernorm_embedding.weight"], w["model.encoder.layernorm_embedding.bias"], 1e-5)
    np.testing.assert_allclose(trace["encoder.embed.out"], ln, atol=ATOL)
    np.testing.assert_array_equal(trace["input.decoder_positions"], np.broadcast_to(np.arange(dec.shape[1]), dec.shape))
    last = trace[f"decoder.blocks.{config['decoder_layers'] - 1}.resid_post"]
    expected = last @ w["model.shared.weight"].T + w["final_logits_bias"]
    np.testing.assert_allclose(trace["logits"], expected, atol=ATOL)
    assert np.abs(w["final_logits_bias"]).max() > 0.01


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_cross_attention_reads_the_encoder_output(name):
    """cross_attn.k from encoder.final_norm.out (t5) or the last encoder block (bart); mask [b, 1, 1, enc]."""
    trace, w, config = _load(name, "reference_batch.safetensors")
    if name == "bart":
        memory = trace[f"encoder.blocks.{config['encoder_layers'] - 1}.resid_post"]
        k = memory @ w["model.decoder.layers.0.encoder_attn.k_proj.weight"].T + w["model.decoder.layers.0.encoder_attn.k_proj.bias"]
    else:
        memory = trace["encoder.final_norm.out"]
        k = memory @ w["decoder.block.0.layer.1.EncDecAttention.k.weight"].T
    batch, enc_len = trace["input.ids"].shape
    expected = k.reshape(batch, enc_len, 4, -1).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(trace["decoder.blocks.0.cross_attn.k"], expected, atol=ATOL)
    keep = trace["decoder.blocks.0.cross_attn.mask"]
    np.testing.assert_array_equal(keep, trace["input.mask"].astype(bool)[:, None, None, :])
    weights = trace["decoder.blocks.0.cross_attn.weights"]
    assert weights.shape == (batch, 4, trace["input.decoder_ids"].shape[1], enc_len)
    assert (weights[~np.broadcast_to(keep, weights.shape)] == 0).all()
    causal = trace["decoder.blocks.0.attn.mask"][0, 0]
    np.testing.assert_array_equal(causal, np.tril(np.ones_like(causal)))
