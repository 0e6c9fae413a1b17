"""`tracer mask` through the CLI: exit codes (0 / 1 with --strict / 2), JSON shape, list, row, save, show."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tracer.cli.main import app

runner = CliRunner()


def run(*args, env=None):
    return runner.invoke(app, ["mask", *args], env={"NO_COLOR": "1", "COLUMNS": "120", **(env or {})})


def run_json(*args):
    result = run(*args, "--json")
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_issue_example_mha_bool():
    r = run("--convention", "torch-mha-bool", "--mask", "[[0,1,1],[0,0,1],[0,0,0]]@bool", "--scores", "2,4,3,3")
    assert r.exit_code == 0, r.output
    assert "b=0..1, h=0..3 identical" in r.output
    assert "■··" in r.output and "■■■" in r.output
    assert "\x1b[" not in r.output  # NO_COLOR


def test_json_shape_hf_left_padding():
    d = run_json("--convention", "hf-2d", "--mask", "[[0,0,1,1],[1,1,1,1]]", "--scores", "2,1,4,4", "--past", "0")
    for key in ("convention", "score_shape", "steps", "keep", "fully_masked", "warnings", "input"):
        assert key in d
    assert d["score_shape"] == [2, 1, 4, 4]
    assert d["keep"][0][0] == [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    assert d["fully_masked"] == [[0, 0, 0], [0, 0, 1]]
    assert {"code", "message"} <= set(d["warnings"][0])
    assert {w["code"] for w in d["warnings"]} >= {"ML005", "ML012"}
    assert all({"op", "in", "out"} <= set(s) for s in d["steps"])


def test_flash_attn_example():
    d = run_json("--convention", "flash-attn", "--is-causal", "--scores", "1,1,2,5")
    assert d["keep"][0][0] == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]


def test_strict_exits_1_only_when_a_warning_fired():
    clean = run("--convention", "torch-sdpa-bool", "--mask", "[[1,0],[1,1]]", "--scores", "1,1,2,2", "--strict")
    assert clean.exit_code == 0, clean.output
    warned = run("--convention", "torch-sdpa-bool", "--mask", "[[0,1],[0,0]]", "--scores", "1,1,2,2", "--strict")
    assert warned.exit_code == 1
    assert "ML001" in warned.output
    assert run("--convention", "torch-sdpa-bool", "--mask", "[[0,1],[0,0]]", "--scores", "1,1,2,2").exit_code == 0


def test_info_notes_do_not_fail_strict():
    r = run("--convention", "hf-4d-eager", "--mask", "[[[[0,min],[0,0]]]]", "--scores", "1,1,2,2", "--strict")
    assert r.exit_code == 0, r.output
    assert "ML003" in r.output


@pytest.mark.parametrize("args, fragment", [
    (["--convention", "torch-mha-bool", "--mask", "[[0,1],[0,0]]@uint8", "--scores", "1,1,2,2"],
     "only bool and floating types of attn_mask are supported"),
    (["--convention", "torch-sdpa-bool", "--mask", "[[1,0],[1,1]]@int64", "--scores", "1,1,2,2"],
     "Expected attn_mask dtype to be bool or float"),
    (["--convention", "jax-bool", "--mask", "[[0.5,1.0]]", "--scores", "1,1,1,2"], "must be bool"),
    (["--convention", "torch-sdpa-bool", "--mask", "[[1,0],[1", "--scores", "1,1,2,2"], "ends too early"),
    (["--convention", "torch-sdpa-bool", "--mask", "[[1,0,1]]", "--scores", "1,1,2,2"], "must match the size"),
    (["--convention", "nope", "--scores", "1,1,2,2"], "unknown convention"),
    (["--convention", "torch-sdpa-bool", "--scores", "1,1,2"], "4 sizes"),
    (["--convention", "torch-sdpa-bool"], "--scores"),
])
def test_rejections_exit_2_with_one_line(args, fragment):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert "error:" in r.output and fragment in r.output
    assert "Traceback" not in r.output


def test_list_human_and_json():
    r = run("--list")
    assert r.exit_code == 0 and "torch-sdpa-bool" in r.output and "ggml-kq-mask" in r.output
    d = run_json("--list")
    names = {c["name"] for c in d["conventions"]}
    assert {"hf-2d", "keras-mha", "flex-mask-mod", "t5-relbias"} <= names


def test_row_mode_human_and_json():
    r = run("--row", "1.2,2.0,0.4", "--tokens", "猫,追,球", "--query", "1")
    assert r.exit_code == 0, r.output
    assert "猫" in r.output and "0 (removed)" in r.output and "< 1" in r.output
    d = run_json("--row", "1.2,2.0,0.4", "--query", "1")
    assert d["masked"]["weights"][2] == 0.0
    assert abs(sum(d["masked"]["weights"]) - 1) < 1e-12
    assert d["wrong_way"]["sum"] < 1


def test_compare_json_and_text():
    d = run_json("--convention", "torch-sdpa-bool", "--mask", "[[1,0],[1,1]]", "--scores", "1,2,2,2",
                 "--compare", "torch-mha-bool")
    assert d["compare"]["kind"] == "inverted"
    r = run("--convention", "torch-sdpa-bool", "--is-causal", "--scores", "1,1,2,4", "--compare", "flash-attn",
            "--mask2", "none")
    assert r.exit_code == 0, r.output
    assert "causal corner" in r.output and "×" in r.output


def test_save_npz(tmp_path):
    out = tmp_path / "m.npz"
    r = run("--convention", "hf-2d", "--mask", "[[0,1,1]]", "--scores", "1,1,3,3", "--hf-impl", "eager",
            "--save", str(out))
    assert r.exit_code == 0, r.output
    with np.load(out, allow_pickle=False) as z:
        assert z["keep"].dtype == bool and z["keep"].shape == (1, 1, 3, 3)
        assert str(z["convention"]) == "hf-2d"
        assert z["soft"][0, 0, 0].all()
        assert np.isneginf(z["additive"]).sum() == 0  # eager blocks are finite (finfo.min)


def test_show_selects_slices_and_caps_big_grids():
    r = run("--convention", "torch-mha-bool", "--mask", "[[0,1],[0,0]]@bool", "--scores", "2,3,2,2",
            "--show", "b=1,h=2")
    assert "b=1, h=2" in r.output and "b=0" not in r.output.split("pattern")[1]
    big = run("--convention", "torch-sdpa-bool", "--is-causal", "--scores", "1,1,100,100")
    assert big.exit_code == 0
    assert "more rows" in big.output and "more keys" in big.output
    assert run("--convention", "torch-sdpa-bool", "--scores", "1,1,2,2", "--show", "b=5").exit_code == 2


def test_distinct_slices_are_listed_separately():
    # (N*H, L, S) with only slice 1 = (b=0, h=1) fully blocked
    text = "[[[0,0],[0,0]],[[1,1],[1,1]],[[0,0],[0,0]],[[0,0],[0,0]]]@bool"
    r = run("--convention", "torch-mha-bool", "--mask", text, "--scores", "2,2,2,2")
    assert "b=0 h=0; b=1 h=0..1 identical" in r.output
    assert "b=0, h=1\n" in r.output


def test_check_weights_from_a_trace(tmp_path):
    from tracer.trace import Step, Trace, tensor_stats

    s = np.random.default_rng(0).normal(size=(1, 1, 3, 3)).astype(np.float32)
    e = np.exp(s - s.max(-1, keepdims=True))
    full = (e / e.sum(-1, keepdims=True)).astype(np.float32)
    after = full * np.tril(np.ones((3, 3), np.float32))  # mask applied after the softmax

    def step(name, a):
        return Step(name, ("batch", "heads", "q_len", "kv_len"), "", None, a.shape, str(a.dtype), tensor_stats(a), a)

    path = tmp_path / "t.safetensors"
    Trace([step("blocks.0.attn.scores", s), step("blocks.0.attn.weights", after)], {}).save(path)
    d = run_json("--convention", "torch-sdpa-bool", "--is-causal", "--check-weights", f"{path}:blocks.0.attn.weights")
    assert d["score_shape"] == [1, 1, 3, 3]  # taken from the weights
    failed = {c["name"] for c in d["check_weights"]["checks"] if c["status"] == "fail"}
    assert "row sums" in failed
    assert d["exit_status"] == 1
    plain = run("--convention", "torch-sdpa-bool", "--is-causal", "--check-weights", f"{path}:blocks.0.attn.weights")
    assert plain.exit_code == 1 and "FAIL" in plain.stdout  # a failed check is exit 1, as in tracer diff
    good = tmp_path / "good.safetensors"
    causal = np.where(np.tril(np.ones((3, 3), bool)), s, -np.inf)
    e = np.exp(causal - causal.max(-1, keepdims=True))
    Trace([step("blocks.0.attn.scores", s), step("blocks.0.attn.weights", (e / e.sum(-1, keepdims=True)).astype(np.float32))],
          {}).save(good)
    passed = run("--convention", "torch-sdpa-bool", "--is-causal", "--check-weights", f"{good}:blocks.0.attn.weights")
    assert passed.exit_code == 0, passed.output


@pytest.mark.parametrize("columns", [60, 80, 150])
def test_list_never_splits_a_word(columns):
    from tracer.masks.conventions import CONVENTIONS

    r = run("--list", env={"COLUMNS": str(columns)})
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    from rich.cells import cell_len

    assert max(cell_len(line) for line in lines) <= columns
    words = set(r.stdout.split())
    for c in CONVENTIONS.values():
        assert c.name in words
        for word in c.summary.split():
            assert word in words, (c.name, word)


def test_json_is_strict_json_even_with_infinities():
    r = run("--convention", "torch-sdpa-float", "--mask", "[[0,nan]]", "--scores", "1,1,1,2", "--json")
    assert r.exit_code == 0

    def reject(constant):  # json.loads accepts bare NaN / Infinity unless told otherwise
        raise AssertionError(f"non-standard JSON constant {constant}")

    data = json.loads(r.stdout, parse_constant=reject)
    assert "NaN" in r.stdout or "nan" in json.dumps(data).lower(), "the NaN must still be reported, as a string"


def test_hf_decode_step_alignment_is_a_note_not_a_strict_failure():
    r = run("--convention", "hf-2d", "--mask", "[[1,1,1,1,1]]", "--scores", "1,1,1,5", "--strict")
    assert r.exit_code == 0, r.output
    assert "ML008" in r.output  # shown, as a note
    flash = run("--convention", "flash-attn", "--is-causal", "--scores", "1,1,1,5", "--strict")
    assert flash.exit_code == 1  # an explicit is_causal with Q != K is a porting hazard


def test_the_pitfall_codes_a_message_cites_are_explained_on_the_screen():
    from tracer.masks.pitfalls import PITFALLS

    r = runner.invoke(app, ["mask", "--row", "1.2,2.0,0.4", "--query", "1"], env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert r.exit_code == 0 and "(pitfall P3" in r.stdout
    assert f"P3   {PITFALLS['P3']}" in r.stdout
