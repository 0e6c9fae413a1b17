"""Issue 16's family defects, each against transformers 5.24 float32 eager (tolerance of test_parity_routes:
1e-5 x max(1, max |transformers|) per step): sliding windows per family, tied and untied embeddings and heads,
the defaults of missing config fields, and the decoder input --decoder-text builds."""

from __future__ import annotations

import json

import numpy as np
import pytest

import random_configs as rc
import test_parity_routes as routes

pytestmark = pytest.mark.live
torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

IDS = [[int(t) for t in np.random.default_rng(16).integers(3, rc.VOCAB, 20)]]


def _parity(folder, **inputs) -> dict:
    from tracer import load_model
    from tracer.capture import capture

    ref = capture(folder, **inputs)
    return routes.compare(ref, routes.run_like(load_model(folder), ref), routes.ATOL32)


def _edit_config(folder, **fields) -> None:
    """Rewrite config.json; a value of ... deletes the field."""
    cfg = json.loads((folder / "config.json").read_text())
    for key, value in fields.items():
        if value is ...:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (folder / "config.json").write_text(json.dumps(cfg))


# ---------- sliding windows ----------


def test_qwen3_moe_use_sliding_window_slides_every_layer(tmp_path):
    """The issue's example: transformers applies the window on every layer (attention weights differed by 0.3-0.5)."""
    kwargs = dict(vocab_size=rc.VOCAB, hidden_size=24, intermediate_size=32, moe_intermediate_size=8, num_experts=4,
                  num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2, head_dim=4,
                  use_sliding_window=True, sliding_window=8, bos_token_id=0, pad_token_id=1, eos_token_id=2)
    rc.build("qwen3_moe", kwargs, tmp_path, seed=16)
    errors = _parity(tmp_path, ids=IDS)
    assert "blocks.0.attn.weights" in errors and "blocks.1.attn.weights" in errors and "logits" in errors


WINDOW_CASES = [
    ("qwen3_moe", dict(use_sliding_window=True, sliding_window=3)),
    ("qwen3_moe", dict(use_sliding_window=False, sliding_window=3)),
    ("qwen2", dict(use_sliding_window=True, sliding_window=3)),  # max_window_layers: 28 by default
    ("qwen2", dict(use_sliding_window=True, sliding_window=3, max_window_layers=1)),
    ("qwen3", dict(use_sliding_window=True, sliding_window=3, layer_types=["sliding_attention", "full_attention"] * 15)),
    ("qwen2_moe", dict(use_sliding_window=True, sliding_window=3, max_window_layers=5)),
    ("mistral", dict(sliding_window=3)),
    ("mistral", dict(sliding_window=None)),
    ("mixtral", dict(sliding_window=3)),
    ("phi3", dict(sliding_window=3)),
    ("starcoder2", dict(sliding_window=3)),
    ("gemma2", dict(sliding_window=3)),
    ("gemma3_text", dict(sliding_window=3)),
    ("gemma3_text", dict(sliding_window=3, sliding_window_pattern=3)),
]
EVERY_LAYER = ("mistral", "mixtral", "phi3", "starcoder2", "qwen3_moe")  # one mask for all layers in transformers


@pytest.mark.parametrize("family,fields", WINDOW_CASES)
def test_window_per_layer_is_the_one_transformers_masks_with(tmp_path, family, fields):
    """30 layers (past qwen's default max_window_layers 28): tracer's window of each layer equals the one the
    transformers config (after its own __post_init__) gives the mask of that layer."""
    from tracer.arch.registry import adapter_for

    sizes = dict(vocab_size=16, hidden_size=8, intermediate_size=8, num_hidden_layers=30, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=4)
    if family in ("qwen3_moe", "qwen2_moe"):
        sizes.update(num_experts=2, num_experts_per_tok=1, moe_intermediate_size=4)
    if family == "qwen2_moe":
        sizes["shared_expert_intermediate_size"] = 4
    if family == "mixtral":
        sizes.update(num_local_experts=2, num_experts_per_tok=1)
    config = getattr(tf, rc.CONFIG_CLASS[family])(**sizes, **fields)
    config.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    ours = adapter_for(cfg).spec_from_config(cfg).sliding_window
    if family in EVERY_LAYER:
        theirs = (config.sliding_window,) * 30
    else:
        theirs = tuple(config.sliding_window if t == "sliding_attention" else None for t in config.layer_types)
    assert ours == theirs


# ---------- tied and untied embeddings and heads ----------


def test_bart_untied_reads_each_stacks_own_embedding_and_head(tmp_path):
    kwargs = dict(rc.draw("bart", np.random.default_rng(1)), tie_word_embeddings=False)
    rc.build("bart", kwargs, tmp_path, seed=16)
    from safetensors import safe_open

    names = set(safe_open(str(tmp_path / "model.safetensors"), "np").keys())
    assert {"model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
            "lm_head.weight"} <= names
    errors = _parity(tmp_path, ids=IDS, decoder_ids=[[2, 5, 7, 9]])
    assert {"encoder.embed.out", "decoder.embed.out", "logits"} <= set(errors)


def _replace_tensors(folder, **new) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    for name, like in new.items():
        tensors[name] = torch.randn(tensors[like].shape, generator=torch.Generator().manual_seed(len(name)))
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize("tie", [True, False])
def test_t5_stacks_and_head_read_their_own_tensors_when_stored(tmp_path, tie):
    """transformers 5.24 ties T5 always, but not tensors the checkpoint holds with other values (v1.1's lm_head,
    separate encoder/decoder embeddings): each reads its own."""
    kwargs = dict(rc.draw("t5", np.random.default_rng(2)), tie_word_embeddings=tie)
    rc.build("t5", kwargs, tmp_path, seed=16)
    _replace_tensors(tmp_path, **{k: "shared.weight" for k in
                                  ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight")})
    errors = _parity(tmp_path, ids=IDS, decoder_ids=[[0, 5, 7, 9]])
    assert {"encoder.embed.out", "decoder.embed.out", "logits"} <= set(errors)


def test_tied_decoder_with_a_stored_head_of_its_own(tmp_path):
    """tie_word_embeddings true, but lm_head.weight stored with other values: transformers reads lm_head."""
    kwargs = dict(rc.draw("llama", np.random.default_rng(3)), tie_word_embeddings=True)
    rc.build("llama", kwargs, tmp_path, seed=16)
    _replace_tensors(tmp_path, **{"lm_head.weight": "model.embed_tokens.weight"})
    assert "logits" in _parity(tmp_path, ids=IDS)


@pytest.mark.parametrize("family", ["bert", "roberta"])
@pytest.mark.parametrize("tie", [True, False])
def test_masked_lm_head_tied_or_untied(tmp_path, family, tie):
    """An untied MLM decoder (its own weight and bias; the head's `bias` feeds nothing) loads and matches."""
    cls = "BertForMaskedLM" if family == "bert" else "RobertaForMaskedLM"
    kwargs = dict(rc.draw(family, np.random.default_rng(4)), tie_word_embeddings=tie, architectures=[cls])
    rc.build(family, kwargs, tmp_path, seed=16)
    errors = _parity(tmp_path, ids=IDS)
    assert "logits" in errors and "head.ln.out" in errors


def test_bart_decoder_with_other_head_counts_than_the_encoder(tmp_path):
    """decoder_attention_heads != encoder_attention_heads (the capture split the decoder's q/k/v by the encoder's)."""
    kwargs = dict(rc.draw("bart", np.random.default_rng(5)), d_model=24, encoder_attention_heads=2,
                  decoder_attention_heads=3)
    rc.build("bart", kwargs, tmp_path, seed=16)
    errors = _parity(tmp_path, ids=IDS, decoder_ids=[[2, 5, 7]])
    assert "decoder.blocks.0.attn.q" in errors and "decoder.blocks.0.cross_attn.weights" in errors


# ---------- a field missing from config.json takes the config class's default ----------

MISSING = [
    ("gpt2", ("activation_function",)),
    ("gemma", ("hidden_act",)),
    ("gemma2", ("attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar")),
    ("gemma2", ("hidden_activation",)),
    ("mixtral", ("rms_norm_eps",)),
    ("olmo2", ("rms_norm_eps",)),
    ("starcoder2", ("hidden_act",)),
    ("bart", ("activation_function",)),
    ("bert", ("hidden_act",)),
    ("opt", ("activation_function",)),
]


@pytest.mark.parametrize("family,fields", MISSING)
def test_a_missing_field_takes_the_config_class_default(tmp_path, family, fields):
    rng = np.random.default_rng(6)
    kwargs = rc.draw(family, rng)
    if family in ("gemma", "gemma2", "starcoder2"):  # a non-default value first, so that the default matters
        kwargs["hidden_activation" if family == "gemma2" else "hidden_act"] = "gelu"
    if family == "gemma2":
        kwargs.update(attn_logit_softcapping=None, final_logit_softcapping=None, query_pre_attn_scalar=8)
    if family in ("mixtral", "olmo2"):
        kwargs["rms_norm_eps"] = 1e-2
    rc.build(family, kwargs, tmp_path, seed=16)
    _edit_config(tmp_path, **{f: ... for f in fields})
    inputs = dict(ids=IDS, decoder_ids=[[2, 5]]) if family == "bart" else dict(ids=IDS)
    errors = _parity(tmp_path, **inputs)  # every step within the tolerance
    assert any(name.endswith("blocks.0.resid_post") for name in errors)


def test_gemma_legacy_gelu_is_the_tanh_gelu(tmp_path):
    """GemmaConfig turns hidden_act "gelu" (the official releases' value) into gelu_pytorch_tanh."""
    kwargs = dict(rc.draw("gemma", np.random.default_rng(7)), hidden_act="gelu")
    rc.build("gemma", kwargs, tmp_path, seed=16)
    assert "blocks.0.mlp.out" in _parity(tmp_path, ids=IDS)


# ---------- --decoder-text is what transformers builds from labels ----------


@pytest.mark.parametrize("name", ["bart", "t5", "t5-gated"])
def test_decoder_text_is_shift_tokens_right_of_the_labels(name):
    from conftest import model_dir
    from tracer import load_model

    folder = model_dir(name)
    tokenizer = tf.AutoTokenizer.from_pretrained(folder)
    config = tf.AutoConfig.from_pretrained(folder)
    labels = tokenizer(text_target="the cat sat", return_tensors="pt").input_ids
    shift = tf.models.bart.modeling_bart.shift_tokens_right if name == "bart" else None
    if shift is not None:
        theirs = shift(labels, config.pad_token_id, config.decoder_start_token_id)
    else:
        theirs = tf.T5ForConditionalGeneration(config)._shift_right(labels)
    ours = load_model(folder).run("hello", decoder_text="the cat sat", keep=["input.*"])
    assert ours["input.decoder_ids"].tolist() == theirs.tolist()
    if name == "bart":  # the decoder start, then the labels' <s>
        assert theirs[0, :2].tolist() == [config.decoder_start_token_id, tokenizer.bos_token_id]
