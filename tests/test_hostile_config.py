"""Issue 11, configs: every value the adapters read is validated; config and checkpoint agree both ways."""

import time

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from hostile import DELETE, assert_contract, copy_model, edit_config, raw_config_value, run_model


@pytest.fixture
def llama(tmp_path):
    return copy_model(tmp_path, "llama")


def test_zero_attention_heads_is_an_error_not_a_zero_division(llama):
    edit_config(llama, num_attention_heads=0)
    assert_contract(run_model(llama), "num_attention_heads is 0, expected an integer in [1, 4096]")


@pytest.mark.parametrize("literal,shown", [('"abc"', '"abc"'), ("[32]", "[32]"), ("NaN", "NaN"), ("1e400", "Infinity"),
                                           ("32.5", "32.5"), ("true", "true"), ("-32", "-32")])
def test_hidden_size_of_the_wrong_type(llama, literal, shown):
    raw_config_value(llama, "hidden_size", literal)
    assert_contract(run_model(llama), f"hidden_size is {shown}, expected an integer")


def test_hidden_size_null_is_refused_as_null(llama):
    raw_config_value(llama, "hidden_size", "null")  # transformers 5 refuses it too (the field is not Optional)
    assert_contract(run_model(llama), "hidden_size is null, expected an integer in [1, 262144]")


def test_hidden_size_with_5000_digits(llama):
    raw_config_value(llama, "hidden_size", "9" * 5000)
    assert_contract(run_model(llama), "not valid JSON")


def test_max_position_embeddings_as_a_string(llama):
    edit_config(llama, max_position_embeddings="32")
    assert_contract(run_model(llama), 'max_position_embeddings is "32", expected an integer')


def test_llama3_rope_scaling_without_factor(llama):
    edit_config(llama, rope_parameters=DELETE, rope_theta=500.0,
                rope_scaling={"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 48})
    assert_contract(run_model(llama), "has no factor")


def test_rope_theta_zero(llama):
    cfg_params = {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                  "original_max_position_embeddings": 48, "rope_theta": 0, "rope_type": "llama3"}
    edit_config(llama, rope_parameters=cfg_params)
    assert_contract(run_model(llama), "rope_theta is 0, expected a finite number > 0")


def test_llama3_equal_frequency_factors(llama):
    cfg_params = {"factor": 8.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                  "original_max_position_embeddings": 48, "rope_theta": 500.0, "rope_type": "llama3"}
    edit_config(llama, rope_parameters=cfg_params)
    assert_contract(run_model(llama), "high_freq_factor is 1.0, expected a finite number > 1")


def test_negative_sliding_window(tmp_path):
    mistral = copy_model(tmp_path, "mistral")
    edit_config(mistral, sliding_window=-4)
    assert_contract(run_model(mistral), "sliding_window is -4, expected an integer")


def test_negative_partial_rotary_factor(tmp_path):
    neox = copy_model(tmp_path, "gpt_neox")
    edit_config(neox, rope_parameters={"partial_rotary_factor": -1, "rope_theta": 10000.0, "rope_type": "default"})
    assert_contract(run_model(neox), "partial_rotary_factor is -1, expected a finite number > 0 and <= 1")


def test_unknown_activation_given_as_a_list(llama):
    edit_config(llama, hidden_act=["silu"])
    assert_contract(run_model(llama), "hidden_act is [\"silu\"], which tracer does not support")


def test_a_billion_layers_fails_fast(llama):
    edit_config(llama, num_hidden_layers=10**9)
    start = time.monotonic()
    assert_contract(run_model(llama), "num_hidden_layers is 1000000000, expected an integer in [1, 4096]")
    assert time.monotonic() - start < 10


def test_sizes_larger_than_the_files_fail_before_loading(llama):
    edit_config(llama, vocab_size=1 << 24)  # 16M x 32 floats: far more than the file holds
    assert_contract(run_model(llama), "need at least")


def test_one_layer_config_on_a_two_layer_checkpoint(llama):
    edit_config(llama, num_hidden_layers=1)
    assert_contract(run_model(llama), "model.layers.1.")


def test_allow_unused_runs_with_a_warning(llama):
    edit_config(llama, num_hidden_layers=1)
    r = run_model(llama, "--allow-unused")
    assert r.exit_code == 0, r.output
    assert "warning: model.layers.1." in r.output and "not used" in r.output


def _add_tensors(folder, **extra):
    t = load_file(folder / "model.safetensors")
    t.update(extra)
    save_file(t, folder / "model.safetensors")


def test_non_float_buffers_are_not_unused_weights(llama):
    _add_tensors(llama, **{"model.embed_tokens.position_ids": np.arange(8, dtype=np.int64)[None]})
    assert run_model(llama).exit_code == 0


def test_ignored_globs_of_the_adapter(llama):
    _add_tensors(llama, **{"model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(4, dtype=np.float32)})
    assert run_model(llama).exit_code == 0


def test_a_classification_head_is_unused(llama):
    _add_tensors(llama, **{"score.weight": np.ones((2, 32), dtype=np.float32)})
    assert_contract(run_model(llama), "score.weight in the checkpoint is not used")


def test_tied_checkpoint_that_also_stores_the_head(tmp_path):
    gpt2 = copy_model(tmp_path, "gpt2")
    t = load_file(gpt2 / "model.safetensors")
    t["lm_head.weight"] = t["transformer.wte.weight"].copy()
    save_file(t, gpt2 / "model.safetensors")
    assert run_model(gpt2).exit_code == 0


def test_accessor_errors_name_field_value_and_form():
    from tracer.checkpoint.config import cfg_bool, cfg_choice, cfg_float, cfg_int, cfg_list
    from tracer.errors import TracerError

    cases = [
        (lambda: cfg_int({"n": "7"}, "n", "fam"), 'n is "7", expected an integer >= 1'),
        (lambda: cfg_int({"n": 9}, "n", "fam", maximum=8), "n is 9, expected an integer in [1, 8]"),
        (lambda: cfg_float({"x": float("inf")}, "x", "fam", minimum=0.0), "x is Infinity, expected a finite number >= 0"),
        (lambda: cfg_bool({"b": "yes"}, "b", "fam"), 'b is "yes", expected true or false'),
        (lambda: cfg_choice({"c": "z"}, "c", "fam", ("a", "b")), 'c is "z", which tracer does not support'),
        (lambda: cfg_list({"l": [1]}, "l", "fam", length=2), "l is [1], expected a list of 2 items"),
    ]
    for call, message in cases:
        with pytest.raises(TracerError) as info:
            call()
        assert message in str(info.value)
        assert "(fam)" in str(info.value)


def test_require_keeps_its_signature():
    from tracer.checkpoint.config import require
    from tracer.errors import TracerError

    assert require({"b": 3}, "a", "b", family="x") == 3
    with pytest.raises(TracerError, match="has no a or b"):
        require({}, "a", "b", family="x")


# ---------- issue 16: null and wrong-typed fields are not silently defaulted ----------
# Each null below is refused by transformers 5.24 too (its config class declares no None for the field, or
# its rope code reads the value: `rope_theta ** ...`, ROPE_INIT_FUNCTIONS[rope_type]); checked by hand with
# AutoConfig + a forward on the fixtures.


@pytest.mark.parametrize("key,shown", [("rope_theta", "rope_theta is null, expected a finite number > 0"),
                                       ("rope_type", "rope_type is null, expected one of default")])
def test_null_rope_parameter_is_an_error(llama, key, shown):
    cfg = {"rope_type": "default", "rope_theta": 10000.0}
    edit_config(llama, rope_parameters=dict(cfg, **{key: None}), rope_scaling=DELETE)
    assert_contract(run_model(llama), shown)


@pytest.mark.parametrize("key,shown", [
    ("rms_norm_eps", "rms_norm_eps is null, expected a finite number"),
    ("hidden_act", "hidden_act is null, expected one of silu"),
    ("attention_bias", "attention_bias is null, expected true or false"),
    ("tie_word_embeddings", "tie_word_embeddings is null, expected true or false"),
    ("max_position_embeddings", "max_position_embeddings is null, expected an integer"),
])
def test_null_field_is_an_error_not_a_default(llama, key, shown):
    edit_config(llama, **{key: None})
    assert_contract(run_model(llama), shown)


def test_top_level_rope_theta_null_in_the_v4_layout(tmp_path):
    v4 = copy_model(tmp_path, "llama-v4config")
    edit_config(v4, rope_theta=None)
    assert_contract(run_model(v4), "rope_theta is null, expected a finite number > 0")


def test_null_where_transformers_reads_it_as_missing(llama):
    """LlamaConfig declares head_dim and num_key_value_heads `int | None`: null is d_model / heads, all heads
    (MistralConfig declares num_key_value_heads `int`: there null is an error)."""
    import json

    from tracer.arch.registry import adapter_for
    from tracer.errors import TracerError

    edit_config(llama, head_dim=None)
    r = run_model(llama)
    assert r.exit_code == 0, r.output
    cfg = dict(json.loads((llama / "config.json").read_text()), num_key_value_heads=None)
    spec = adapter_for(cfg).spec_from_config(cfg)
    assert spec.n_kv_heads == spec.n_heads and spec.d_head == spec.d_model // spec.n_heads
    with pytest.raises(TracerError, match="num_key_value_heads is null"):
        adapter_for({"model_type": "mistral"}).spec_from_config(dict(cfg, model_type="mistral"))


@pytest.mark.parametrize("family,fields,shown", [
    ("t5", {"feed_forward_proj": None}, "feed_forward_proj is None"),
    ("gpt2", {"activation_function": None}, "activation_function is null"),
    ("gpt2", {"hidden_size": None}, "hidden_size is null"),  # n_embd's alias: transformers maps it over n_embd
    ("roberta", {"pad_token_id": None}, "pad_token_id is null"),
    ("qwen2", {"use_sliding_window": None}, "use_sliding_window is null"),
    ("qwen2", {"layer_types": ["sliding_attention"] * 3, "use_sliding_window": False},
     "layer_types has sliding_attention layers, but sliding_window is null"),
    ("mistral", {"sliding_window": 0}, "every layer slides, but sliding_window is 0"),
    ("t5", {"relative_attention_num_buckets": 8, "relative_attention_max_distance": 4}, "must exceed the 4 exact"),
    ("gpt_neox", {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0,
                                      "partial_rotary_factor": 0.25}}, "more than 2 rotary dims"),
])
def test_other_silent_defaults_are_errors(tmp_path, family, fields, shown):
    folder = copy_model(tmp_path, family)
    edit_config(folder, **fields)
    assert_contract(run_model(folder), shown)


def test_gemma3_bidirectional_sliding_layers_are_refused(tmp_path):
    """transformers' bidirectional window looks both ways (|i - j| <= w // 2); tracer's looks back only."""
    folder = copy_model(tmp_path, "gemma3_text")
    edit_config(folder, use_bidirectional_attention=True)
    assert_contract(run_model(folder), "use_bidirectional_attention with sliding-window layers")


def test_untied_masked_lm_without_its_decoder_is_an_error(tmp_path):
    """tie_word_embeddings false: the decoder's own weight is needed (transformers would start it at random)."""
    folder = copy_model(tmp_path, "bert-mlm")
    edit_config(folder, tie_word_embeddings=False)
    assert_contract(run_model(folder), "cls.predictions.decoder.weight")


@pytest.mark.parametrize("family", ["gemma", "gemma2"])
def test_gemma_bidirectional_flag_is_refused(tmp_path, family):
    """transformers 5.24 eager keeps gemma/gemma2 causal under use_bidirectional_attention (create_causal_mask),
    sdpa without padding does not: tracer refuses rather than pick one (it used to run bidirectional)."""
    folder = copy_model(tmp_path, family)
    edit_config(folder, use_bidirectional_attention=True)
    assert_contract(run_model(folder), "use_bidirectional_attention is not supported")
