"""ONNX capture against tracer (issue 18): fixtures exported with both of torch's exporters, the graph run
unoptimised by onnxruntime, its values named through the module scopes, then `compare` against tracer's own
run of the folder with the diff's default tolerance (atol 1e-4, rtol 1e-3: float32 against float32). An
export with one initializer altered fails at the step that reads it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")  # the dynamo exporter's dependency

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import tracer  # noqa: E402
from tracer.capture.onnx import node_scope, onnx_trace  # noqa: E402
from tracer.diff.compare import compare  # noqa: E402

from conftest import model_dir  # noqa: E402
from onnx_export import export  # noqa: E402

pytestmark = pytest.mark.live
FAMILIES = ("gpt2", "llama", "qwen2", "bert", "t5")
EXPORTERS = ("torchscript", "dynamo")
EXPORT_IDS = np.array([[0, 12, 30, 31, 15, 27]])
RUN_IDS = [[0, 12, 30, 31, 15, 27, 40, 9]]  # another length than the export's: the axes are dynamic


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    made = {}

    def get(family: str, exporter: str) -> Path:
        if (family, exporter) not in made:
            out = tmp_path_factory.mktemp("onnx") / f"{family}-{exporter}.onnx"
            decoder = np.array([[0, 5, 7]]) if family == "t5" else None
            made[family, exporter] = export(model_dir(family), out, exporter, EXPORT_IDS, decoder)
        return made[family, exporter]

    return get


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("family", FAMILIES)
def test_an_export_matches_tracer_step_by_step(exports, family, exporter):
    got = onnx_trace(exports(family, exporter), model_dir(family), ids=RUN_IDS)
    ref = tracer.load_model(model_dir(family)).run(ids=RUN_IDS)
    report = compare(ref, got.trace)
    assert not report.diverged, report.first_divergence
    compared = {s.name for s in report.compared}
    stack = "decoder." if family == "t5" else ""
    assert {f"{stack}blocks.0.attn.q", f"{stack}blocks.0.attn.weights", f"{stack}blocks.1.resid_post"} <= compared
    assert ("logits" in compared) == (family != "bert"), compared
    assert len(compared) >= 25
    assert got.exporter == exporter


def test_an_altered_initializer_is_caught_where_it_is_read(exports, tmp_path):
    path = exports("llama", "dynamo")
    model = onnx.load(str(path), load_external_data=True)
    # the dynamo exporter folds the transpose into the weight and renames it (val_256): find it by its node's scope
    inits = {i.name: i for i in model.graph.initializer}
    target = next(inits[name] for node in model.graph.node if node_scope(node) == "model.layers.1.mlp.down_proj"
                  for name in node.input if name in inits and len(inits[name].dims) == 2)
    target.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(target) * np.float32(1.5), target.name))
    altered = tmp_path / "altered.onnx"
    onnx.save(model, str(altered))
    got = onnx_trace(altered, model_dir("llama"), ids=RUN_IDS)
    first = compare(tracer.load_model(model_dir("llama")).run(ids=RUN_IDS), got.trace).first_divergence
    assert first is not None and first.name == "blocks.1.mlp.out", first
