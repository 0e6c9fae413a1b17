"""Export layouts without torch: optimum's past inputs, its merged decoder, split encoder-decoder files and
module scopes that start below the model's root, on small graphs built with onnx.helper."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from tracer.capture import onnx as cap  # noqa: E402
from tracer.capture.onnx_graphs import align_scopes, find_graphs, no_past_branch  # noqa: E402
from tracer.capture.onnx_inputs import feeds_for  # noqa: E402
from tracer.cli.main import app  # noqa: E402
from tracer.errors import TracerError  # noqa: E402

from conftest import model_dir  # noqa: E402

IDS = np.array([[1, 4, 2]])


def _past(name: str, dims) -> object:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _decoder_graph(past_dims=("batch", 2, "past", 8), past_name="past_key_values.0.key", extra_inputs=()):
    """y = W[input_ids] (scope model.embed); takes a past it does not read, as a decoder's no-past graph."""
    w = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "W")
    node = helper.make_node("Gather", ["W", "input_ids"], ["y"], name="/model/embed/Gather")
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "pos"]),
              _past(past_name, list(past_dims)), *extra_inputs]
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_empty_past_takes_heads_and_d_head_from_tracers_keys():
    feeds = feeds_for(_decoder_graph().graph, {"ids": IDS}, {False: (2, 8)})
    assert feeds["past_key_values.0.key"].shape == (1, 2, 0, 8)
    dynamic = feeds_for(_decoder_graph(("batch", "kv", "past", "d")).graph, {"ids": IDS}, {False: (2, 8)})
    assert dynamic["past_key_values.0.key"].shape == (1, 2, 0, 8)


@pytest.mark.parametrize("dims, name, said", [
    (("batch", 4, "past", 8), "past_key_values.0.key", r"'past_key_values.0.key' is \[\?, 4, \?, 8\]; tracer's keys are \[batch, 2, past, 8\]"),
    (("batch", 2, 5, 8), "past_key_values.0.key", r"is \[\?, 2, 5, 8\]"),
    (("batch2", "past", 8), "past_key_values.0.key", r"'past_key_values.0.key' is not laid out .*rank 3"),
    (("batch", 2, "past", 8), "past_key_values.0.key_value", r"'past_key_values.0.key_value' is not laid out .*its name"),
])
def test_a_past_of_another_layout_is_an_error_naming_the_input(dims, name, said):
    with pytest.raises(TracerError, match=said):
        feeds_for(_decoder_graph(dims, name).graph, {"ids": IDS}, {False: (2, 8)})


def test_a_cross_attention_past_needs_the_merged_graphs_branch():
    graph = _decoder_graph(past_name="past_key_values.0.encoder.key").graph
    with pytest.raises(TracerError, match="decoder_with_past_model.onnx"):
        feeds_for(graph, {"ids": IDS}, {True: (2, 8)})
    graph.input.append(helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1]))
    feeds = feeds_for(graph, {"ids": IDS}, {True: (2, 8)})
    assert feeds["use_cache_branch"].tolist() == [False] and feeds["past_key_values.0.encoder.key"].shape == (1, 2, 0, 8)


def test_a_split_decoder_graph_takes_the_decoder_ids_and_the_encoder_output():
    extra = [helper.make_tensor_value_info(n, t, s) for n, t, s in (
        ("encoder_hidden_states", TensorProto.FLOAT, ["batch", "enc", 4]),
        ("encoder_attention_mask", TensorProto.INT64, ["batch", "enc"]))]
    graph = _decoder_graph(extra_inputs=extra).graph
    hidden = np.ones((1, 5, 4), np.float32)
    feeds = feeds_for(graph, {"ids": np.ones((1, 5), np.int64), "mask": np.ones((1, 5), np.int64),
                              "decoder_ids": IDS, "encoder_hidden": hidden}, {False: (2, 8)})
    assert feeds["input_ids"].tolist() == IDS.tolist() and feeds["encoder_hidden_states"] is hidden
    assert feeds["encoder_attention_mask"].shape == (1, 5)


def _merged():
    """optimum's merged layout: If(use_cache_branch) with then = 2 * W[ids], else = W[ids] + 1 (scope model.embed)."""
    w = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "W")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")  # a branch initializer, as optimum keeps scalars
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)
    then = helper.make_graph([helper.make_node("Gather", ["W", "input_ids"], ["g"], name="/model/embed/Gather"),
                              helper.make_node("Add", ["g", "g"], ["logits"], name="/model/embed/Add")], "with_past", [], [out])
    other = helper.make_graph([helper.make_node("Gather", ["W", "input_ids"], ["g"], name="/model/embed/Gather"),
                               helper.make_node("Add", ["g", "one"], ["logits"], name="/model/embed/Add")],
                              "no_past", [], [out], [one])
    node = helper.make_node("If", ["use_cache_branch"], ["logits"], name="optimum::if", then_branch=then, else_branch=other)
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "pos"]),
              _past("past_key_values.0.key", ["batch", 2, "past", 8]),
              helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])]
    g = helper.make_graph([node], "merged", inputs, [out], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_merged_decoders_no_past_branch_is_inlined_and_its_values_named(tmp_path):
    model = _merged()
    flat = no_past_branch(model)
    assert [n.op_type for n in flat.graph.node] == ["Gather", "Add"] and "one" in {i.name for i in flat.graph.initializer}
    assert no_past_branch(flat) is flat  # nothing left to inline
    path = tmp_path / "decoder_model_merged.onnx"
    onnx.save(model, str(path))
    got = cap.capture_onnx(path, {"ids": IDS}, {False: (2, 8)})
    W = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.testing.assert_array_equal(got.tensors["model.embed"], W[IDS] + 1)  # the else branch, not 2 * W[ids]
    np.testing.assert_array_equal(got.outputs["logits"], W[IDS] + 1)


def test_scopes_below_the_models_root_are_read_under_the_stack_that_matches():
    named = {"block.0.layer.1.DenseReluDense": "a", "block.0.layer.0.SelfAttention:softmax": "b", "final_layer_norm": "c"}
    known = {"encoder.block.0.layer.1.DenseReluDense", "encoder.block.0.layer.0.SelfAttention",
             "decoder.block.0.layer.0.SelfAttention", "decoder.block.0.layer.2.DenseReluDense",
             "encoder.final_layer_norm", "decoder.final_layer_norm"}
    moved, said = align_scopes(named, known, "encoder")
    assert moved == {"encoder.block.0.layer.1.DenseReluDense": "a", "encoder.block.0.layer.0.SelfAttention:softmax": "b",
                     "encoder.final_layer_norm": "c"} and said == "scopes read under encoder."
    bart = {"layers.0.self_attn": "a", "layers.0.fc1": "b"}  # the same modules in both stacks: the hint decides
    both = {f"model.{s}.layers.0.{m}" for s in ("encoder", "decoder") for m in ("self_attn", "fc1")}
    assert set(align_scopes(bart, both, "encoder")[0]) == {"model.encoder.layers.0.self_attn", "model.encoder.layers.0.fc1"}
    wrapped = {"wrapper.model.layers.0.mlp": "a", "wrapper.lm_head": "b"}
    assert align_scopes(wrapped, {"model.layers.0.mlp", "lm_head"})[0] == {"model.layers.0.mlp": "a", "lm_head": "b"}
    right = {"model.layers.0.mlp": "a"}
    assert align_scopes(right, {"model.layers.0.mlp"}) == (right, "")


def _touch(folder, *names):
    folder.mkdir(exist_ok=True)
    for n in names:
        (folder / n).write_bytes(b"")
    return folder


def test_an_export_folder_picks_its_graphs(tmp_path):
    seq2seq = _touch(tmp_path / "s", "encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx",
                     "decoder_model_merged.onnx")
    got = find_graphs(seq2seq)
    assert (got.encoder.name, got.decoder.name) == ("encoder_model.onnx", "decoder_model.onnx")
    assert find_graphs(seq2seq / "encoder_model.onnx").decoder.name == "decoder_model.onnx"
    merged_only = _touch(tmp_path / "m", "encoder_model.onnx", "decoder_model_merged.onnx")
    assert find_graphs(merged_only).decoder.name == "decoder_model_merged.onnx"
    decoder_only = _touch(tmp_path / "d", "decoder_model.onnx", "decoder_with_past_model.onnx", "decoder_model_merged.onnx")
    assert find_graphs(decoder_only).decoder.name == "decoder_model.onnx" and find_graphs(decoder_only).encoder is None
    assert find_graphs(_touch(tmp_path / "g", "model.onnx", "decoder_model.onnx")).decoder.name == "model.onnx"
    split_decoder = find_graphs(seq2seq / "decoder_model_merged.onnx", takes_encoder_output=lambda p: True)
    assert split_decoder.encoder.name == "encoder_model.onnx"


@pytest.mark.parametrize("files, path, said", [
    (("encoder_model.onnx", "decoder_with_past_model.onnx"), "", "encoder_model.onnx but no decoder_model.onnx or decoder_model_merged.onnx"),
    (("encoder_model.onnx",), "encoder_model.onnx", "no decoder_model.onnx or decoder_model_merged.onnx next to it"),
    (("a.onnx", "b.onnx"), "", r"several .onnx files and none tracer knows to pick \(a.onnx, b.onnx\)"),
    (("config.json",), "", "no .onnx file in this folder"),
])
def test_a_missing_graph_is_a_one_line_error(tmp_path, files, path, said):
    folder = _touch(tmp_path / "x", *files)
    with pytest.raises(TracerError, match=said):
        find_graphs(folder / path if path else folder)


def test_a_split_decoder_without_its_encoder_is_refused(tmp_path):
    folder = _touch(tmp_path / "x", "decoder_model.onnx")
    with pytest.raises(TracerError, match="takes encoder_hidden_states.*no encoder_model.onnx next to it"):
        find_graphs(folder / "decoder_model.onnx", takes_encoder_output=lambda p: True)


def test_the_cli_refuses_a_lone_encoder_and_a_folder_without_model(tmp_path):
    folder = _touch(tmp_path / "export", "encoder_model.onnx", "config.json")
    out = tmp_path / "out.safetensors"
    runner = CliRunner()
    result = runner.invoke(app, ["capture", str(folder), "--model", str(model_dir("t5")), "--ids", "0,5", "-o", str(out)])
    assert result.exit_code == 2 and "error:" in result.output and "no decoder_model.onnx" in result.output
    result = runner.invoke(app, ["capture", str(folder), "--ids", "0,5", "-o", str(out)])
    assert result.exit_code == 2 and "needs --model DIR" in result.output
    assert "Traceback" not in result.output and not out.exists()
