"""`tracer run --json`: the same content for programs, agreeing with the saved trace and the engine's arrays."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import tracer
from conftest import model_dir
from tracer.cli.main import app
from tracer.trace import Trace

runner = CliRunner()


def run_json(*args) -> dict:
    result = runner.invoke(app, ["run", *map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("run") / "t.safetensors"
    report = run_json("春天来", "--model", model_dir("llama"), "--save", path, "--lens")
    return report, Trace.load(path)


def test_json_has_the_promised_sections(saved):
    report, _ = saved
    for key in ("tokens", "steps", "mask", "attention", "top_k", "model", "lens"):
        assert key in report, key
    assert all({"id", "piece"} <= set(t) for t in report["tokens"])
    assert all({"name", "shape", "axes", "stats"} <= set(s) for s in report["steps"])
    assert all({"token", "id", "prob"} <= set(t) for t in report["top_k"])


def test_json_steps_agree_with_the_saved_trace(saved):
    report, trace = saved
    assert [s["name"] for s in report["steps"]] == trace.names()
    for s in report["steps"]:
        step = trace.step(s["name"])
        assert tuple(s["shape"]) == step.shape == trace[s["name"]].shape
        assert tuple(s["axes"]) == step.axes
        for key in ("mean", "std", "min", "max"):
            assert s["stats"][key] == pytest.approx(step.stats[key], rel=1e-12, abs=1e-12)


def test_json_top_k_agrees_with_the_saved_probabilities(saved):
    report, trace = saved
    pos = report["distribution"]["position"]
    assert pos == len(report["tokens"]) - 1
    probs = trace["probs"][0, pos]
    assert [t["id"] for t in report["top_k"]] == list(np.argsort(-probs, kind="stable")[:10])
    for t in report["top_k"]:
        assert t["prob"] == pytest.approx(float(probs[t["id"]]), rel=1e-6)
    assert report["top_k"][-1]["cum"] == pytest.approx(sum(t["prob"] for t in report["top_k"]))
    assert [t["id"] for t in report["tokens"]] == trace["input.ids"][0].tolist()


def test_json_attention_is_the_recorded_weights_and_rows_sum_to_one(saved):
    report, trace = saved
    att = report["attention"]
    weights = trace[f"blocks.{att['layer']}.attn.weights"][0]
    assert att["layer"] == 1 and len(att["heads"]) == weights.shape[0]
    for h in att["heads"]:
        w = np.array(h["weights"])
        np.testing.assert_array_equal(w, weights[h["head"]])
        np.testing.assert_allclose(w.sum(axis=-1), 1.0, atol=1e-5)
    assert att["rows_sum_to_one"] and att["max_row_error"] < 1e-5


def test_json_mask_grid_is_the_mask_the_engine_applied():
    report = run_json("春天来", "Hello there, world", "--batch", "--model", model_dir("mistral"))
    mask = report["mask"]
    assert [p["name"] for p in mask["parts"]] == ["causal", "window", "padding"]
    trace = tracer.load_model(model_dir("mistral")).run(["春天来", "Hello there, world"])
    applied = trace[f"blocks.{mask['layer']}.attn.mask"][0, 0]
    np.testing.assert_array_equal(np.array(mask["grids"]["keep"]), applied)
    assert mask["fully_masked_rows"] == [int(q) for q in np.flatnonzero(~applied.any(axis=-1))] == [8, 9, 10, 11]
    # Fully masked rows are zero, the others sum to 1.
    sums = np.array(report["attention"]["heads"][0]["row_sums"])
    np.testing.assert_allclose(sums, [1.0] * 8 + [0.0] * 4, atol=1e-5)


def test_lens_last_layer_reproduces_the_final_distribution(saved):
    report, trace = saved
    last = report["lens"]["layers"][-1]
    top = report["top_k"][0]
    assert last["top_id"] == top["id"]
    assert last["final_top_prob"] == pytest.approx(top["prob"], rel=1e-5)
    assert [r["layer"] for r in report["lens"]["layers"]] == ["embed", "0", "1"]


def test_json_values_are_the_trace_entries_at_the_kept_indices():
    report = run_json("春天来", "--model", model_dir("llama"), "--steps", "blocks.0.attn.q", "--values")
    entry = report["values"]["steps"][0]
    trace = tracer.load_model(model_dir("llama")).run("春天来")
    full = trace["blocks.0.attn.q"][0]  # batch row 0: [heads, pos, d_head]
    assert entry["axes"] == ["heads", "pos", "d_head"]
    assert entry["index"][-1] == [0, 1, 2, 5, 6, 7]  # d_head 8: the first and last three
    np.testing.assert_allclose(np.array(entry["data"]), full[np.ix_(*entry["index"])], rtol=1e-6)


def test_steps_filter_narrows_the_json_too():
    report = run_json("春天来", "--model", model_dir("llama"), "--steps", "*.attn.weights")
    assert [s["name"] for s in report["steps"]] == ["blocks.0.attn.weights", "blocks.1.attn.weights"]
    assert "top_k" not in report


def test_json_is_strict_json_even_with_minus_infinity():
    result = runner.invoke(app, ["run", "春天来", "--model", str(model_dir("llama")), "--steps", "blocks.0.attn.masked_scores",
                                 "--values", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert "-inf" in json.dumps(data["values"]["steps"][0]["data"])


# ---------- issue 16: long inputs are windowed; the pooled vectors are whole ----------


def _timed_run(*args):
    import time

    t = time.perf_counter()
    result = runner.invoke(app, ["run", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stdout, time.perf_counter() - t


def test_json_of_a_long_input_is_windowed_like_the_screen_and_full_on_request(tmp_path):
    """400 tokens: the grids hold 64 x 64 positions around the focus (the whole [400, 400] with --json-full),
    each cell equal to the full grid's cell at the named positions; the document stays small and its time is
    of the order of the screen run's (before: 10 MB at 300 tokens, 92 MB and 5x the screen's time at 900)."""
    ids = ",".join(str(5 + i % 97) for i in range(400))
    base = ["--ids", ids, "--allow-long", "--only", "attention,mask,tokens", "--head", "1"]
    text, t_json = _timed_run(*base, "--json")
    _screen, t_screen = _timed_run(*base)
    windowed = json.loads(text)
    full = json.loads(_timed_run(*base, "--json", "--json-full")[0])
    assert len(text) < 1_500_000, len(text)  # the full document is ~13 MB
    assert len(json.dumps(full)) > 5 * len(text)
    assert t_json < 3 * t_screen + 1.0, (t_json, t_screen)
    for key in ("attention", "mask"):
        w = windowed[key]["json_window"]
        assert w["of"] == [400, 400] and len(w["queries"]) <= 64 and len(w["keys"]) <= 64
        assert w["queries"][0] == 0 and 399 in w["queries"] and windowed[key]["focus"] == 399
        assert "json_window" not in full[key]
    w = windowed["attention"]["json_window"]
    got, ref = windowed["attention"]["heads"][0], full["attention"]["heads"][0]
    assert np.array_equal(np.array(got["weights"]), np.array(ref["weights"])[np.ix_(w["queries"], w["keys"])])
    assert got["row_sums"] == [ref["row_sums"][q] for q in w["queries"]]
    for name, grid in windowed["mask"]["grids"].items():
        assert np.array_equal(np.array(grid), np.array(full["mask"]["grids"][name])[np.ix_(w["queries"], w["keys"])])


def test_json_of_a_short_input_is_not_windowed():
    report = run_json("--ids", "5,6,7", "--model", model_dir("llama"))
    assert "json_window" not in report["attention"] and len(report["attention"]["heads"][0]["weights"]) == 3


def test_json_full_needs_json():
    result = runner.invoke(app, ["run", "--ids", "5,6", "--json-full"])
    assert result.exit_code == 2 and "--json-full goes with --json" in result.output


def test_json_holds_the_whole_pooled_vector_of_every_row():
    """The vectors equal the trace's pooled step (float32 values written exactly), for every prompt."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.safetensors"
        report = run_json("--model", model_dir("bert"), "A cat sat.", "A dog sat.", "--save", path)
        pooled = Trace.load(path)["pooled"]
    vectors = np.array(report["pooled"]["vectors"])
    assert vectors.shape == pooled.shape == (2, report["pooled"]["dim"])
    assert np.array_equal(vectors, pooled.astype(np.float64))
    assert report["pooled"]["head"] == vectors[0, :len(report["pooled"]["head"])].tolist()
