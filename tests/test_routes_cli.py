"""`tracer run` on the encoder and encoder-decoder routes, through the CLI, on the committed fixtures."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import conftest
from conftest import model_dir
from tracer import load_model
from tracer.cli.main import app
from tracer.engine.relative_bias import relative_buckets
from tracer.trace import Trace

pytestmark = pytest.mark.skipif(not getattr(conftest, "ENCODERS", ()), reason="no encoder fixtures yet")
runner = CliRunner()
ENV = {"COLUMNS": "120", "NO_COLOR": "1"}


def run(*args: str):
    return runner.invoke(app, ["run", *args], env=ENV)


def run_json(*args: str) -> dict:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines[0].startswith("error: ") and "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("name,route", [("bert", "encoder, bidirectional"), ("roberta", "encoder, bidirectional"),
                                        ("t5", "encoder-decoder: encoder bidirectional, decoder causal + cross-attention"),
                                        ("bart", "encoder-decoder: encoder bidirectional, decoder causal + cross-attention")])
def test_model_card_names_the_route(name, route):
    args = ["--model", str(model_dir(name)), "--ids", "5,17,42,8"]
    if name == "roberta":
        args += ["--position", "2"]
    assert run_json(*args)["model"]["route"] == route


def test_mlm_fills_every_mask_token():
    folder = model_dir("bert-mlm")
    text = "the [MASK] sleeps on the [MASK]."
    d = run_json("--model", str(folder), text)
    masks = [t["pos"] for t in d["tokens"] if t["piece"] == "[MASK]"]
    assert len(masks) == 2 and [f["distribution"]["position"] for f in d["fills"]] == masks
    assert all(f["distribution"]["kind"] == "fill" for f in d["fills"])
    probs = load_model(folder).run(text)["probs"][0]
    for f, pos in zip(d["fills"], masks):
        assert f["top_k"][0]["id"] == int(np.argmax(probs[pos]))
    screen = run("--model", str(folder), text, "--only", "top_k").output
    assert screen.count("Fill in") == 2 and "Next token" not in screen


def test_encoder_without_head_shows_the_pooled_vector_and_cosines():
    folder = model_dir("bert")
    d = run_json("--model", str(folder), "the cat sleeps.", "the cat sleeps on the mat.", "你好!")
    assert "top_k" not in d and "distribution" not in d
    p = d["pooled"]
    assert p["mode"] == "mean" and p["normalize"] and p["source"] == "modules.json"
    assert abs(p["norm"] - 1.0) < 1e-5
    cos = np.array(p["cosine"])
    assert cos.shape == (3, 3) and np.allclose(np.diag(cos), 1.0, atol=1e-5) and np.allclose(cos, cos.T)
    pooled = load_model(folder).run(["the cat sleeps.", "the cat sleeps on the mat.", "你好!"])["pooled"]
    assert abs(cos[0, 2] - float(pooled[0] @ pooled[2])) < 1e-5


def test_cross_attention_view_has_decoder_rows_and_encoder_columns():
    folder = model_dir("t5")
    d = run_json("--model", str(folder), "--ids", "5,17,42,8,9", "--ids", "6,7", "--decoder-ids", "0,4,9",
                 "--batch-row", "1")
    att = d["attention"]
    assert att["part"] == "cross_attn" and att["step"].startswith("decoder.blocks.")
    assert len(att["row_labels"]) == 3 and len(att["labels"]) == 5
    w = np.array(att["heads"][0]["weights"])
    assert w.shape == (3, 5) and np.allclose(w[:, 2:], 0), "row 1 has 2 real encoder tokens: pads get no weight"
    assert np.allclose(w.sum(-1), 1, atol=1e-5)
    keep = np.array(d["cross_mask"]["grids"]["keep"])
    assert keep.shape == (3, 5) and keep[:, :2].all() and not keep[:, 2:].any()
    causal = np.array(d["mask"]["grids"]["keep"])
    assert np.array_equal(causal, np.tril(np.ones((3, 3), bool))), "the decoder's self mask is causal"


def test_encoder_stack_and_its_bucket_table():
    folder = model_dir("t5")
    d = run_json("--model", str(folder), "--ids", ",".join(str(i) for i in range(5, 17)), "--stack", "encoder",
                 "--attn", "self", "--layer", "1")
    assert d["attention"]["step"] == "encoder.blocks.1.attn.weights"
    b = d["mask"]["buckets"]
    spec = load_model(folder).spec.encoder.relative_bias
    assert b["bidirectional"] and b["num_buckets"] == spec.num_buckets
    distances = np.array([r["distance"] for r in b["rows"]])
    assert (distances < 0).any() and (distances > 0).any(), "the encoder looks both ways"
    buckets = relative_buckets(distances, True, spec.num_buckets, spec.max_distance)
    assert [r["bucket"] for r in b["rows"]] == buckets.tolist()
    trace = load_model(folder).run(ids=[list(range(5, 17))])
    bias = trace["encoder.blocks.0.attn.position_bias"][0]
    q = b["query"]
    for r in b["rows"]:
        np.testing.assert_allclose(r["bias"], bias[:, q, q + r["distance"]], rtol=1e-6)


def test_padded_encoder_rows_still_attend_and_the_panel_says_so():
    d = run_json("--model", str(model_dir("bert")), "--ids", "5,17,42,8", "--ids", "6,7", "--batch-row", "1")
    keep = np.array(d["mask"]["grids"]["keep"])
    assert keep[2:, :2].all() and not keep[:, 2:].any(), "padding masks keys only"
    assert any("padded query rows still attend" in n for n in d["mask"]["notes"])
    assert not any(p["name"] == "causal" for p in d["mask"]["parts"])


def test_position_rule_is_shown_and_can_be_overridden():
    folder = str(model_dir("bert"))
    left = ["--model", folder, "--ids", "5,17,42,8", "--ids", "6,7", "--pad-side", "left", "--batch-row", "1"]
    d = run_json(*left)
    assert d["mask"]["positions"]["row"] == [0, 1, 2, 3] and d["mask"]["positions"]["warning"]["code"] == "ML012"
    d = run_json(*left, "--positions", "from-mask")
    assert d["mask"]["positions"]["row"] == [0, 0, 0, 1]


@pytest.mark.parametrize("name", ["bert-mlm", "t5", "bart"])
def test_save_and_diff_on_every_route(tmp_path, name):
    folder = str(model_dir(name))
    args = ["--model", folder, "--ids", "5,17,42,8", "--position", "1"] if name == "bert-mlm" else ["--model", folder, "--ids", "5,17,42,8"]
    for out in ("a", "b"):
        assert run(*args, "--save", str(tmp_path / f"{out}.safetensors"), "--only", "model").exit_code == 0
    t = Trace.load(tmp_path / "a.safetensors")
    assert t.meta["model"]["route"] == load_model(folder).route
    result = runner.invoke(app, ["diff", str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")], env=ENV)
    assert result.exit_code == 0 and "MATCH" in result.output


def test_lens_on_the_decoder_of_an_encoder_decoder_model():
    folder = model_dir("bart")
    d = run_json("--model", str(folder), "--ids", "5,17,42,8", "--decoder-ids", "2,9,11", "--lens")
    layers = d["lens"]["layers"]
    assert [r["layer"] for r in layers] == ["embed"] + [str(i) for i in range(load_model(folder).spec.n_layers)]
    assert layers[-1]["top_id"] == d["top_k"][0]["id"], "the last lens row is the model's own output"


@pytest.mark.parametrize("args,words", [
    (["--model", "bert", "--ids", "5,17", "--lens"], "--lens"),
    (["--model", "bert", "--ids", "5,17", "--decoder-ids", "1,2"], "no decoder input"),
    (["--model", "bert-mlm", "the cat sleeps."], "no mask token"),
    (["--model", "t5", "--ids", ",".join(["5"] * 65)], "the input is 65 tokens; this model's encoder allows 64"),
    (["--model", "t5", "--ids", "5,17", "--stack", "encoder", "--attn", "cross"], "no cross-attention"),
    (["--model", "bert", "--ids", "5,17", "--attn", "cross"], "self-attention only"),
    (["--model", "bert", "--ids", "5,17", "--token-types", "0,1,1"], "--token-types row 0"),
    (["--model", "bert", "--ids", "5,17", "--positions", "sideways"], "--positions"),
])
def test_route_errors_are_one_line(args, words):
    args = [str(model_dir(a)) if i and args[i - 1] == "--model" else a for i, a in enumerate(args)]
    assert words in one_error_line(run(*args))
