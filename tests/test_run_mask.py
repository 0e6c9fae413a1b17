"""`tracer run --mask --mask-convention`: a mask written in another framework's convention drives the run."""

import json

import numpy as np
from typer.testing import CliRunner

from conftest import model_dir
from tracer.cli.main import app
from tracer.trace import Trace

runner = CliRunner()
LLAMA = str(model_dir("llama"))


def _run(*args):
    return runner.invoke(app, ["run", "--model", LLAMA, *args])


def test_hf_2d_all_ones_equals_the_built_causal_mask(tmp_path):
    assert _run("--ids", "5,17,42,8", "--save", str(tmp_path / "a.safetensors"), "--json").exit_code == 0
    r = _run("--ids", "5,17,42,8", "--mask", "[[1,1,1,1]]", "--mask-convention", "hf-2d",
             "--save", str(tmp_path / "b.safetensors"), "--json")
    assert r.exit_code == 0, r.output
    a, b = Trace.load(tmp_path / "a.safetensors"), Trace.load(tmp_path / "b.safetensors")
    np.testing.assert_array_equal(a["logits"], b["logits"])
    assert b.meta["mask"]["source"] == "override" and b.meta["mask"]["read"]["convention"] == "hf-2d"
    data = json.loads(r.stdout)  # stderr confirms the saved file
    assert data["mask_input"]["convention"] == "hf-2d"
    assert np.array(data["mask_input"]["keep"])[0, 0].tolist() == np.tril(np.ones((4, 4), int)).tolist()


def test_an_sdpa_all_true_mask_lets_tokens_see_the_future_and_diff_finds_it(tmp_path):
    _run("--ids", "5,17,42,8", "--save", str(tmp_path / "causal.safetensors"), "--json")
    r = _run("--ids", "5,17,42,8", "--mask", "[[1,1,1,1]]@bool", "--mask-convention", "torch-sdpa-bool",
             "--save", str(tmp_path / "open.safetensors"), "--json")
    assert r.exit_code == 0, r.output
    w = Trace.load(tmp_path / "open.safetensors")["blocks.0.attn.weights"]
    assert (np.triu(w[0, 0], 1) > 0).any(), "with an all-True keep mask, future keys get weight"
    d = runner.invoke(app, ["diff", str(tmp_path / "causal.safetensors"), str(tmp_path / "open.safetensors"), "--json"])
    assert d.exit_code == 1
    assert json.loads(d.output)["first_divergence"]["step"] == "blocks.0.attn.mask"


def test_a_mask_that_cannot_land_on_the_scores_is_an_error(tmp_path):
    out = tmp_path / "t.safetensors"
    r = _run("--ids", "5,17,42", "--mask", "[[1,1,1,1,1]]@bool", "--mask-convention", "torch-sdpa-bool", "--save", str(out))
    assert r.exit_code == 2 and r.output.startswith("error: ") and "Traceback" not in r.output
    assert not out.exists()


def test_mask_without_convention_is_an_error():
    r = _run("--ids", "5,17,42", "--mask", "[[1,1,1]]")
    assert r.exit_code == 2 and "--mask-convention" in r.output


def test_screen_shows_how_the_mask_was_read():
    r = _run("--ids", "5,17,42", "--mask", "[[0,1,1]]", "--mask-convention", "hf-2d", "--only", "mask")
    assert r.exit_code == 0, r.output
    assert "read as hf-2d" in r.output and "steps" in r.output and "ML012" in r.output  # left padding noticed


def test_left_padding_explains_position_ids_and_warns_for_learned_positions():
    def mask_json(model, side):
        r = runner.invoke(app, ["run", "--model", str(model_dir(model)), "--ids", "5,6,7", "--ids", "8",
                                "--pad-side", side, "--batch-row", "1", "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)["mask"]

    gpt2 = mask_json("gpt2", "left")["positions"]
    assert gpt2["row"] == [0, 0, 0] and gpt2["warning"]["code"] == "ML012" and gpt2["warning"]["level"] == "warn"
    assert mask_json("llama", "left")["positions"]["warning"]["level"] == "info"
    assert mask_json("gpt2", "right")["positions"] is None
    screen = runner.invoke(app, ["run", "--model", str(model_dir("gpt2")), "--ids", "5,6,7", "--ids", "8",
                                 "--pad-side", "left", "--only", "mask"])
    assert "ML012" in screen.output and "cumsum(mask) - 1" in screen.output
