"""ONNX capture of the layouts optimum and onnxruntime-genai write (issue 18), against tracer's own run with the
diff's default tolerance, both of torch's exporters:

- a decoder with a cache (`model.onnx`: input_ids, attention_mask, position_ids, past_key_values.N.key/value
  -> logits, present.N.key/value), run on an empty past; optimum's `decoder_model.onnx` (no past inputs) and
  `decoder_model_merged.onnx` (an If on use_cache_branch, fed False);
- optimum's split encoder-decoder (`encoder_model.onnx` then `decoder_model.onnx`, the encoder's
  last_hidden_state fed to the decoder), from the encoder file or the folder.

optimum-onnx 0.1.0 (the release on PyPI) requires transformers < 4.58, so these exports are made here in
optimum's layout (tests/onnx_export.py), not by optimum itself."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")  # the dynamo exporter's dependency

from typer.testing import CliRunner  # noqa: E402

import tracer  # noqa: E402
from tracer.capture.onnx import onnx_trace  # noqa: E402
from tracer.cli.main import app  # noqa: E402
from tracer.diff.compare import compare  # noqa: E402
from tracer.trace import Trace  # noqa: E402

from conftest import model_dir  # noqa: E402
from onnx_export import export_seq2seq_split, export_with_cache, merge_like_optimum  # noqa: E402

pytestmark = pytest.mark.live
EXPORTERS = ("torchscript", "dynamo")
EXPORT_IDS = np.array([[0, 12, 30, 31, 15, 27]])
RUN_IDS = [[0, 12, 30, 31, 15, 27, 40, 9]]  # another length than the export's: the axes are dynamic
MAX_DELTA = 1e-4  # the diff's atol; what is seen is ~3e-6 (float32 against float32)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made = {}

    def get(kind: str, family: str, exporter: str) -> Path:
        key = (kind, family, exporter)
        if key not in made:
            out = tmp_path_factory.mktemp(f"{kind}-{family}-{exporter}")
            if kind == "cache":
                export_with_cache(model_dir(family), out / "model.onnx", exporter, EXPORT_IDS)
            elif kind == "merged":
                export_with_cache(model_dir(family), out / "with_past.onnx", exporter, EXPORT_IDS)
                export_with_cache(model_dir(family), out / "no_past.onnx", exporter, EXPORT_IDS, with_past=False)
                (out / "export").mkdir()
                merge_like_optimum(out / "no_past.onnx", out / "with_past.onnx", out / "export" / "decoder_model_merged.onnx")
                out = out / "export"
            else:
                export_seq2seq_split(model_dir(family), out, exporter, EXPORT_IDS, np.array([[0, 5, 7]]))
            made[key] = out
        return made[key]

    return get


def _clean(family: str, got) -> set[str]:
    """The steps compared with tracer's run; fails at the first step outside the diff's tolerance."""
    report = compare(tracer.load_model(model_dir(family)).run(ids=RUN_IDS), got.trace)
    assert not report.diverged, report.first_divergence
    worst = max(s.metrics["max_abs"] for s in report.compared if s.metrics and "max_abs" in s.metrics)
    assert worst < MAX_DELTA, worst
    return {s.name for s in report.compared}


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_decoder_with_a_cache_runs_on_an_empty_past(folders, family, exporter):
    folder = folders("cache", family, exporter)
    got = onnx_trace(folder / "model.onnx", model_dir(family), ids=RUN_IDS)
    compared = _clean(family, got)
    assert {"blocks.0.attn.q", "blocks.0.attn.weights", "blocks.1.resid_post", "logits"} <= compared
    assert got.exporter == exporter and got.graphs.encoder is None


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_optimums_merged_decoder_runs_its_branch_without_past(folders, exporter):
    folder = folders("merged", "llama", exporter)
    got = onnx_trace(folder, model_dir("llama"), ids=RUN_IDS)  # the folder: decoder_model_merged.onnx picked
    assert got.graphs.decoder.name == "decoder_model_merged.onnx"
    compared = _clean("llama", got)
    assert {"blocks.0.attn.weights", "blocks.1.mlp.out", "logits"} <= compared
    # the merged file as optimum feeds it on a first pass (use_cache_branch False, pasts of length 0) gives
    # the logits the inlined branch gave
    session = ort.InferenceSession(str(folder / "decoder_model_merged.onnx"), providers=["CPUExecutionProvider"])
    ids = np.array(RUN_IDS)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(ids.shape[1])[None],
             "use_cache_branch": np.array([False])}
    feeds.update({i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
                  for i in session.get_inputs() if i.name.startswith("past_key_values.")})
    np.testing.assert_allclose(session.run(["logits"], feeds)[0], got.trace["logits"], atol=1e-5)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("family", ["t5", "bart"])
def test_optimums_split_encoder_decoder_runs_the_encoder_then_the_decoder(folders, family, exporter):
    folder = folders("split", family, exporter)
    got = onnx_trace(folder / "encoder_model.onnx", model_dir(family), ids=RUN_IDS)
    assert got.graphs.decoder == folder / "decoder_model.onnx"
    prefix = "encoder" if family == "t5" else "model.encoder"
    assert got.scopes == [f"encoder_model.onnx: scopes read under {prefix}."]
    compared = _clean(family, got)
    assert {"encoder.blocks.0.attn.weights", "encoder.blocks.1.resid_post", "decoder.blocks.0.attn.weights",
            "decoder.blocks.0.cross_attn.weights", "decoder.blocks.1.mlp.out", "logits"} <= compared
    assert ("encoder.final_norm.out" in compared) == (family == "t5")  # BART's post-norm encoder has none
    assert got.trace.meta["onnx_file"] == "encoder_model.onnx + decoder_model.onnx"


def test_the_cli_takes_the_export_folder_and_says_which_graphs_ran(folders, tmp_path):
    folder = folders("split", "t5", "torchscript")
    out = tmp_path / "onnx.safetensors"
    result = CliRunner().invoke(app, ["capture", str(folder), "--model", str(model_dir("t5")), "--ids",
                                      ",".join(map(str, RUN_IDS[0])), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "encoder_model.onnx then decoder_model.onnx" in result.output
    report = compare(tracer.load_model(model_dir("t5")).run(ids=RUN_IDS), Trace.load(out))
    assert not report.diverged and "decoder.blocks.0.cross_attn.weights" in {s.name for s in report.compared}


def test_a_decoder_graph_alone_finds_its_encoder_and_an_encoder_alone_is_refused(folders, tmp_path):
    folder = folders("split", "bart", "torchscript")
    got = onnx_trace(folder / "decoder_model.onnx", model_dir("bart"), ids=RUN_IDS)
    assert got.graphs.encoder == folder / "encoder_model.onnx"
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(folder / "encoder_model.onnx", lone / "encoder_model.onnx")
    out = tmp_path / "x.safetensors"
    result = CliRunner().invoke(app, ["capture", str(lone / "encoder_model.onnx"), "--model", str(model_dir("bart")),
                                      "--ids", "0,12,30", "-o", str(out)])
    assert result.exit_code == 2 and "no decoder_model.onnx or decoder_model_merged.onnx" in result.output
    assert "Traceback" not in result.output and not out.exists()
