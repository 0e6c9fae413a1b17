"""Property suite: hostile configs, mask literals, id lists and options keep the contract."""

import json
import shutil

import pytest
from hypothesis import given, strategies as st

from conftest import model_dir
from fuzz_strategies import assert_cli_contract, bounded, json_values, only_tracer_errors
from hostile import cli
from tracer.cli.common import parse_int_list
from tracer.masks.conventions import CONVENTIONS, canonical_mask
from tracer.model.model import load_model

pytestmark = pytest.mark.fuzz

# every field an adapter reads, per family fixture
FIELDS = {
    "llama": ["hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "num_hidden_layers",
              "intermediate_size", "vocab_size", "rms_norm_eps", "attention_bias", "mlp_bias", "tie_word_embeddings",
              "hidden_act", "max_position_embeddings", "rope_parameters", "rope_scaling", "rope_theta", "model_type"],
    "gpt2": ["n_embd", "n_head", "n_layer", "n_inner", "vocab_size", "n_positions", "layer_norm_epsilon",
             "scale_attn_weights", "activation_function", "tie_word_embeddings"],
    "gpt_neox": ["hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size",
                 "layer_norm_eps", "use_parallel_residual", "rope_parameters", "rotary_pct", "attention_bias"],
    "opt": ["hidden_size", "num_attention_heads", "num_hidden_layers", "ffn_dim", "vocab_size",
            "max_position_embeddings", "do_layer_norm_before", "enable_bias", "word_embed_proj_dim"],
    "qwen2": ["sliding_window", "use_sliding_window", "max_window_layers", "layer_types", "num_hidden_layers"],
    "mistral": ["sliding_window", "num_hidden_layers"],
    "gemma": ["hidden_size", "hidden_activation", "use_bidirectional_attention"],
    "phi3": ["sliding_window", "rope_parameters"],
    "bert": ["hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size",
             "max_position_embeddings", "layer_norm_eps", "type_vocab_size", "hidden_act", "architectures"],
    "roberta": ["pad_token_id", "max_position_embeddings", "type_vocab_size", "hidden_size", "architectures"],
    "t5": ["d_model", "num_heads", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "vocab_size",
           "feed_forward_proj", "relative_attention_num_buckets", "relative_attention_max_distance",
           "layer_norm_epsilon", "tie_word_embeddings", "scale_decoder_outputs", "decoder_start_token_id", "n_positions"],
    "bart": ["d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
             "encoder_ffn_dim", "decoder_ffn_dim", "vocab_size", "max_position_embeddings", "scale_embedding",
             "activation_function", "decoder_start_token_id"],
}
rope_values = st.fixed_dictionaries({}, optional={
    "rope_type": st.one_of(st.sampled_from(["default", "linear", "llama3", "yarn"]), json_values),
    "rope_theta": json_values, "factor": json_values, "low_freq_factor": json_values,
    "high_freq_factor": json_values, "original_max_position_embeddings": json_values,
    "partial_rotary_factor": json_values})


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    out = {}
    for family in FIELDS:
        out[family] = root / family
        shutil.copytree(model_dir(family), out[family])
    return out


@given(family=st.sampled_from(sorted(FIELDS)), data=st.data())
def test_generated_configs(folders, family, data):
    folder = folders[family]
    cfg = json.loads((model_dir(family) / "config.json").read_text())
    for key in data.draw(st.lists(st.sampled_from(FIELDS[family]), min_size=1, max_size=3, unique=True)):
        cfg[key] = data.draw(rope_values if key.startswith("rope_") and key != "rope_theta" else json_values)
    (folder / "config.json").write_text(json.dumps(cfg))
    with bounded():
        model = only_tracer_errors(load_model, folder)
        if model is not None:
            only_tracer_errors(model.run, ids=[[1, 2]])


literal_chars = st.text(alphabet="[],01 -.einfatrueTF@boolmin2x", max_size=40)
literal_trees = st.recursive(st.sampled_from(["0", "1", "true", "F", "-inf", "nan", "min", "2.5", "1e400"]),
                             lambda inner: st.lists(inner, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"),
                             max_leaves=16)
suffixes = st.sampled_from(["", "@bool", "@int64", "@float16", "@bfloat16", "@uint8", "@float128", "@"])


@given(text=st.one_of(literal_chars, st.tuples(literal_trees, suffixes).map("".join)),
       convention=st.sampled_from(sorted(CONVENTIONS)), shape=st.tuples(*[st.integers(1, 3)] * 4))
def test_generated_mask_literals(text, convention, shape):
    with bounded():
        only_tracer_errors(canonical_mask, convention, text, shape)


id_text = st.one_of(
    st.text(alphabet="0123456789,- +²⑤٣x\u00a0", max_size=30),
    st.lists(st.integers(-5, 2**64), max_size=5).map(lambda xs: ",".join(map(str, xs))),
    st.text(max_size=20),
)


@given(text=id_text)
def test_generated_id_lists(text):
    ids = only_tracer_errors(parse_int_list, text, "--ids")
    if ids is not None:
        assert all(isinstance(i, int) and abs(i) < 10**18 for i in ids)


OPTIONS = {
    "--ids": id_text, "--top-k": st.text(max_size=6), "--layer": st.text(max_size=4), "--head": st.text(max_size=4),
    "--position": st.text(max_size=4), "--batch-row": st.text(max_size=3), "--layers": st.text(max_size=8),
    "--only": st.text(max_size=10), "--steps": st.text(max_size=10), "--keep": st.text(max_size=10),
    "--pad-side": st.text(max_size=6), "--dtype": st.sampled_from(["float32", "float64", "float16", ""]),
    "--target": st.text(max_size=6),
}


@given(picked=st.lists(st.sampled_from(sorted(OPTIONS)), max_size=4, unique=True), data=st.data())
def test_generated_run_options(tmp_path_factory, picked, data):
    out = tmp_path_factory.mktemp("o") / "t.safetensors"
    args = ["run", "--model", str(model_dir("llama")), "--ids", "1,2,3", "--save", str(out)]
    for opt in picked:
        value = data.draw(OPTIONS[opt])
        args += [opt, value]
    result = cli(*args)
    assert_cli_contract(result, allowed=(0, 2))
    assert out.exists() == (result.exit_code == 0), result.output  # a failed run writes nothing
    assert not [p for p in out.parent.iterdir() if "tracer-tmp" in p.name]
