"""llama.cpp's model-conversion file set: `tracer run --save-logits DIR` writes the reference side as
run-org-model.py does (pytorch-MODEL.bin float32 logits of the last position, .txt, -tokens.bin int32,
-prompt.txt), and `tracer diff REF llamacpp-MODEL.bin` reads the converted side: tokens first, then llama.cpp's
NMSE band as the verdict (exit 0 below 1e-2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

import tracer
from tracer.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "fixtures/default-model"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [*map(str, args)], env={"COLUMNS": "120", "NO_COLOR": "1"})


def _saved(tmp_path, prompt="春天来"):
    out = tmp_path / "data"
    result = invoke("run", prompt, "--save-logits", out, "--only", "model")
    assert result.exit_code == 0, result.output
    return out


def _as_llamacpp(data: Path, logits=None, tokens=None) -> Path:
    """The converted side as llama-debug --save-logits names it (here: tracer's own numbers, perhaps changed)."""
    for suffix in (".bin", "-tokens.bin"):
        shutil.copy(data / f"pytorch-default-model{suffix}", data / f"llamacpp-default-model{suffix}")
    if logits is not None:
        logits.astype("<f4").tofile(data / "llamacpp-default-model.bin")
    if tokens is not None:
        np.asarray(tokens, "<i4").tofile(data / "llamacpp-default-model-tokens.bin")
    return data / "llamacpp-default-model.bin"


def test_save_logits_writes_the_four_files_as_run_org_model_does(tmp_path):
    data = _saved(tmp_path)
    trace = tracer.load_model(DEFAULT).run(text="春天来")
    logits = np.fromfile(data / "pytorch-default-model.bin", dtype=np.float32)
    assert np.array_equal(logits, trace["logits"][0, -1])
    ids = np.fromfile(data / "pytorch-default-model-tokens.bin", dtype=np.int32)
    assert ids.tolist() == trace["input.ids"][0].tolist()
    lines = (data / "pytorch-default-model.txt").read_text().splitlines()
    assert len(lines) == logits.size and lines[3] == f"3: {logits[3]:.6f}"
    prompt = (data / "pytorch-default-model-prompt.txt").read_text(encoding="utf-8").splitlines()
    assert prompt == ["prompt: 春天来", f"n_tokens: {ids.size}", "token ids: " + ", ".join(map(str, ids.tolist()))]


def test_the_same_logits_are_perfect_and_pass(tmp_path):
    converted = _as_llamacpp(_saved(tmp_path))
    result = invoke("diff", DEFAULT, converted, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["verdict"] == "pass" and out["band"] == "perfect" and out["max_abs"] == 0 and out["top_k_overlap"] == 1
    files = invoke("diff", tmp_path / "data/pytorch-default-model.bin", converted)  # the two files, as compare-logits.py
    assert files.exit_code == 0 and "perfect: NMSE 0" in files.output


def test_noisy_logits_get_their_band_and_fail_past_1e_2(tmp_path):
    data = _saved(tmp_path)
    ref = np.fromfile(data / "pytorch-default-model.bin", dtype=np.float32).astype(np.float64)
    noise = np.random.default_rng(0).standard_normal(ref.size)
    for scale, band, code in ((0.05, "good", 0), (0.3, "acceptable", 1)):  # NMSE ~ scale^2
        mine = ref + scale * ref.std() * noise
        expected = np.mean((mine.astype(np.float32) - ref) ** 2) / np.var(ref)  # check-nmse.py's measure
        result = invoke("diff", DEFAULT, _as_llamacpp(data, logits=mine), "--json")
        out = json.loads(result.stdout)
        assert result.exit_code == code and out["band"] == band, result.output
        assert abs(out["nmse"] - expected) <= 1e-6 * expected


def test_other_tokens_are_said_first(tmp_path):
    converted = _as_llamacpp(_saved(tmp_path), tokens=[1, 278, 263, 276])
    result = invoke("diff", DEFAULT, converted, "春天来")  # TEXT: tokenized by REF, held to the file's ids
    assert result.exit_code == 1 and result.output.startswith("the inputs differ") and "position 0" in result.output
    assert invoke("diff", DEFAULT, converted).exit_code == 1  # without TEXT: run on the file's ids, logits differ


def test_errors_are_one_line(tmp_path):
    data = _saved(tmp_path)
    converted = _as_llamacpp(data, logits=np.zeros(7, np.float32))
    result = invoke("diff", DEFAULT, converted)
    assert result.exit_code == 2 and result.output.startswith("error: ") and "7 logits" in result.output
    (data / "llamacpp-default-model-tokens.bin").write_bytes(b"\0\0\0")
    result = invoke("diff", DEFAULT, converted)
    assert result.exit_code == 2 and "not a whole number of 4-byte values" in result.output
    batch = invoke("run", "春天", "秋天", "--batch", "--save-logits", tmp_path / "b")
    assert batch.exit_code == 2 and "one prompt" in batch.output, batch.output
    assert not (tmp_path / "b").exists()  # refused before the folder is made
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = invoke("run", "春天", "--save-logits", afile)
    assert result.exit_code == 2 and "not a folder" in result.output and afile.read_text() == "x"
