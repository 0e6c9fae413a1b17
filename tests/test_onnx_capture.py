"""ONNX capture without torch: small graphs built with onnx.helper, scoped as torch's exporters scope them."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tracer.capture import onnx as cap  # noqa: E402
from tracer.errors import TracerError  # noqa: E402

D = 4


def _graph(scoped_by: str = "name", fixed_pos: int | None = None):
    """x = W_E[ids]; h = x @ W (module `model.proj`); y = h + x (module `model`); softmax inside `model.attn`."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(10, D)).astype(np.float32), "W_E"),
             numpy_helper.from_array(rng.normal(size=(D, D)).astype(np.float32), "W")]

    def node(op, ins, outs, scope):
        n = helper.make_node(op, ins, outs, name=("/" + scope.replace(".", "/") + "/" + op) if scoped_by == "name" else f"node_{outs[0]}")
        if scoped_by == "meta":
            entry = n.metadata_props.add()
            entry.key, entry.value = "pkg.torch.onnx.name_scopes", repr([""] + _prefixes(scope) + [outs[0]])
        return n

    nodes = [node("Gather", ["W_E", "input_ids"], ["x"], "model.embed"),
             node("MatMul", ["x", "W"], ["h"], "model.proj"),
             node("Add", ["h", "x"], ["y"], "model"),
             node("MatMul", ["y", "y_t"], ["qk"], "model.attn"),
             node("Transpose", ["y"], ["y_t"], "model.attn"),
             node("Softmax", ["qk"], ["w"], "model.attn")]
    nodes[4].attribute.append(helper.make_attribute("perm", [0, 2, 1]))
    nodes = [nodes[0], nodes[1], nodes[2], nodes[4], nodes[3], nodes[5]]
    pos = fixed_pos if fixed_pos is not None else "pos"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, pos])],
                          [helper.make_tensor_value_info("w", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), inits


def _prefixes(scope: str) -> list[str]:
    parts = scope.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


@pytest.mark.parametrize("scoped_by", ["name", "meta"])
def test_module_boundaries_name_outputs_inputs_and_attention_weights(scoped_by):
    model, _ = _graph(scoped_by)
    b = cap.module_boundaries(model.graph)
    assert b.named["model.proj"] == "h" and b.named["model.proj:input"] == "x"
    assert b.named["model.embed"] == "x"
    assert b.named["model.attn:softmax"] == "w" and b.named["model.attn:input"] == "y"
    assert b.named["model.attn:scores"] == "qk"
    assert b.unscoped == 0


def test_the_two_exporters_are_told_apart():
    assert cap.exporter_of(_graph("name")[0].graph) == "torchscript"
    assert cap.exporter_of(_graph("meta")[0].graph) == "dynamo"
    assert cap.exporter_of(_graph("none")[0].graph) == "unknown"


@pytest.mark.parametrize("runner", ["onnxruntime", "reference"])
def test_capture_runs_the_graph_and_returns_each_named_value(tmp_path, monkeypatch, runner):
    if runner == "onnxruntime":
        pytest.importorskip("onnxruntime")
    else:
        monkeypatch.setattr(cap, "run_values", cap._run_reference)
    model, inits = _graph("meta")
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    ids = np.array([[1, 4, 2]])
    got = cap.capture_onnx(path, {"ids": ids, "mask": np.ones_like(ids)})
    W_E, W = (numpy_helper.to_array(i) for i in inits)
    x = W_E[ids]
    y = x @ W + x
    qk = y @ y.transpose(0, 2, 1)
    w = np.exp(qk - qk.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    np.testing.assert_allclose(got.tensors["model.proj"], x @ W, rtol=1e-5)
    np.testing.assert_allclose(got.tensors["model.attn:softmax"], w, rtol=1e-4, atol=1e-6)
    assert got.exporter == "dynamo"


def test_inputs_are_filled_by_role_and_a_fixed_shape_is_refused():
    model, _ = _graph("name", fixed_pos=3)
    ids = np.array([[1, 2, 3, 4]])
    with pytest.raises(TracerError, match=r"fixed shape \[1, 3\]"):
        cap.feeds_for(model.graph, {"ids": ids, "mask": np.ones_like(ids)})
    assert cap.input_role("input.1") == "ids" and cap.input_role("attention_mask.1") == "mask"
    assert cap.input_role("past_key_values.3.key") == "past" and cap.input_role("pixel_values") is None


def test_an_input_tracer_cannot_fill_is_named():
    model, _ = _graph("name")
    model.graph.input.append(helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, [1, 3]))
    with pytest.raises(TracerError, match="pixel_values"):
        cap.feeds_for(model.graph, {"ids": np.array([[1, 2]]), "mask": np.ones((1, 2), np.int64)})


def test_unreadable_and_unscoped_files_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf at all \x00\xff")
    with pytest.raises(TracerError, match="not a readable ONNX model"):
        cap.load_graph(bad)
    with pytest.raises(TracerError, match="no such ONNX file"):
        cap.load_graph(tmp_path / "missing.onnx")
    model, _ = _graph("none")
    path = tmp_path / "plain.onnx"
    onnx.save(model, str(path))
    with pytest.raises(TracerError, match="no module scopes"):
        cap.capture_onnx(path, {"ids": np.array([[1, 2]]), "mask": np.ones((1, 2), np.int64)})
