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
