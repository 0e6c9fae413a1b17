"""tracer.dump: a hand-written port records its steps under tracer's names, checked at each call; the file
diffs against tracer's own run; `tracer steps --check` reviews a dump before any diff."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tracer
from tracer.diff.compare import compare
from tracer.diff.diagnose import rotary_pairing
from tracer.dump import Recorder, check_file, expected_steps, layout_permutation
from tracer.errors import TracerError
from tracer.trace import Trace
from tracer.trace.trace import write_safetensors

from conftest import model_dir
from ports import llama_port

LLAMA = model_dir("llama")
IDS = [0, 378, 300, 331, 15, 277, 287]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Trace:
    return tracer.load_model(LLAMA).run(ids=[IDS])


def port_trace(tmp_path: Path, rope: str = "rotate_half") -> Trace:
    path = tmp_path / f"port-{rope}.safetensors"
    with Recorder(path, model=LLAMA) as rec:
        llama_port.run(LLAMA, IDS, rec, rope=rope)
    return Trace.load(path)


def test_a_faithful_numpy_port_diffs_clean(reference, tmp_path):
    report = compare(reference, port_trace(tmp_path))
    assert not report.diverged, report.first_divergence
    compared = {s.name for s in report.compared}
    assert {"blocks.0.attn.q", "blocks.0.attn.q_rot", "blocks.1.attn.weights", "logits", "probs"} <= compared


def test_the_port_layout_is_transposed_to_tracers(reference, tmp_path):
    port = port_trace(tmp_path)
    assert port.step("blocks.0.attn.k").shape == reference.step("blocks.0.attn.k").shape == (1, 2, len(IDS), 8)
    np.testing.assert_allclose(port["blocks.0.attn.k"], reference["blocks.0.attn.k"], atol=1e-6)


def test_an_interleaved_rope_port_fails_at_q_rot_with_the_reason(reference, tmp_path):
    report = compare(reference, port_trace(tmp_path, rope="interleaved"))
    first = report.first_divergence
    assert first is not None and first.name == "blocks.0.attn.q_rot" and first.reason == "numeric"
    assert "interleaved" in first.note and "rotate_half" in first.note
    assert all(s.status == "pass" for s in report.steps[: report.steps.index(first)] if s.status != "missing")


@pytest.mark.parametrize("pairing", ["rotate_half", "interleaved"])
def test_rotary_pairing_is_read_from_the_pair_lengths(pairing):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 5, 8))
    theta = rng.uniform(0, 6.28, size=(5, 4))
    c, s = np.cos(theta), np.sin(theta)
    if pairing == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        y = np.stack([a * c - b * s, a * s + b * c], axis=-1).reshape(x.shape)
    else:
        a, b = x[..., :4], x[..., 4:]
        y = np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    assert rotary_pairing(x, y) == pairing
    assert rotary_pairing(x, y * 1.5) is None  # not a rotation: lengths change


def _rec(tmp_path) -> Recorder:
    rec = Recorder(tmp_path / "d.safetensors", model=LLAMA)
    rec("input.ids", np.array([IDS[:3]]))
    return rec


@pytest.mark.parametrize("name, value, words", [
    ("blocks.0.attn.qq", np.zeros((1, 4, 3, 8), np.float32), "did you mean 'blocks.0.attn.q'"),
    ("blocks.2.attn.q", np.zeros((1, 4, 3, 8), np.float32), "the model has 2 blocks"),
    ("blocks.0.attn.q", np.zeros((1, 3, 4, 8), np.float32), "pass layout='bshd'"),
    ("blocks.0.attn.q", np.zeros((1, 4, 5, 8), np.float32), "pos=3"),
    ("blocks.0.attn.k", np.zeros((1, 4, 3, 8), np.float32), "kv_heads=2"),
    ("blocks.0.attn.mask", np.zeros((1, 1, 3, 3), np.float32), "boolean keep-mask"),
    ("blocks.0.mlp.pre", np.zeros((1, 3, 64), np.int32), "floating-point"),
    ("logits", np.zeros((1, 3, 100), np.float32), "vocab=384"),
])
def test_a_wrong_step_is_an_error_at_the_call_with_the_expected_axes(tmp_path, name, value, words):
    rec = _rec(tmp_path)
    with pytest.raises(TracerError) as e:
        rec(name, value)
    assert words in str(e.value)


def test_ids_must_be_integers_and_a_step_is_recorded_once(tmp_path):
    rec = Recorder(tmp_path / "d.safetensors")
    with pytest.raises(TracerError, match="integers"):
        rec("input.ids", np.zeros((1, 3), np.float32))
    rec("input.ids", np.zeros((1, 3), np.int64))
    with pytest.raises(TracerError, match="recorded twice"):
        rec("input.ids", np.zeros((1, 3), np.int64))


def test_without_a_model_sizes_are_held_to_the_earlier_steps(tmp_path):
    rec = Recorder(tmp_path / "d.safetensors")
    rec("embed.out", np.zeros((1, 3, 16), np.float32))
    with pytest.raises(TracerError, match=r"pos=3, d_model=16"):
        rec("blocks.0.resid_post", np.zeros((1, 4, 16), np.float32))
    rec("blocks.0.attn.scores", np.zeros((1, 2, 3, 3), np.float32))  # q_len and kv_len are the positions
    with pytest.raises(TracerError, match="kv_len=3"):
        rec("blocks.1.attn.scores", np.zeros((1, 2, 3, 4), np.float32))


def test_layouts_must_be_permutations_and_apply_to_head_steps_only(tmp_path):
    with pytest.raises(TracerError, match="not a permutation"):
        layout_permutation("bshx")
    rec = _rec(tmp_path)
    with pytest.raises(TracerError, match="does not apply"):
        rec("embed.out", np.zeros((1, 3, 32), np.float32), layout="bshd")
    assert layout_permutation("bshd") == (0, 2, 1, 3)


def test_bfloat16_arrays_are_widened_exactly(tmp_path):
    rec = _rec(tmp_path)
    x = np.linspace(-3, 3, 96, dtype=np.float32).reshape(1, 3, 32).astype(ml_dtypes.bfloat16)
    out = rec("embed.out", x)
    assert out.dtype == np.float32 and np.array_equal(out, x.astype(np.float32))
    path = rec.close()
    step = Trace.load(path).step("embed.out")
    assert "bfloat16" in step.op


def test_an_exception_in_the_port_leaves_no_file(tmp_path):
    path = tmp_path / "d.safetensors"
    with pytest.raises(RuntimeError):
        with Recorder(path, model=LLAMA) as rec:
            rec("input.ids", np.array([IDS]))
            raise RuntimeError("the port crashed")
    assert not path.exists()


def test_a_missing_folder_is_refused_before_any_step(tmp_path):
    with pytest.raises(TracerError, match="no such folder"):
        Recorder(tmp_path / "nowhere" / "d.safetensors")


def test_expected_steps_are_what_the_model_records():
    for name in ("llama", "gpt2", "bert", "t5", "qwen2_moe", "gemma2", "opt-350m"):
        ran = tracer.load_model(model_dir(name)).run(ids=[[1, 2, 3]])
        assert set(expected_steps(model_dir(name))) == set(ran.names()), name


def test_check_file_names_the_unknown_misshaped_wrong_dtype_and_missing_steps(tmp_path):
    path = tmp_path / "port.safetensors"  # a foreign dump, written by anyone: no tracer metadata
    write_safetensors(path, {"input.ids": np.zeros((1, 3), np.int64),
                             "blocks.0.attn.q": np.zeros((1, 3, 4, 8), np.float32),  # transposed
                             "blocks.0.attn.mask": np.zeros((1, 1, 3, 3), np.float32),  # additive
                             "blocks.0.attn.hook_q": np.zeros((1, 3, 4, 8), np.float32)}, {})
    r = check_file(Trace.load(path), LLAMA)
    assert not r.ok
    assert r.unknown == ("blocks.0.attn.hook_q",)
    assert [n for n, _ in r.misshaped] == ["blocks.0.attn.q"] and "layout='bshd'" in r.misshaped[0][1]
    assert [n for n, _ in r.wrong_dtype] == ["blocks.0.attn.mask"]
    assert "logits" in r.missing and "input.ids" not in r.missing


def _tracer(*args):
    return subprocess.run([sys.executable, "-m", "tracer.cli.main", *args], capture_output=True, text=True)


def test_steps_check_command_exit_status_and_json(tmp_path, reference):
    good = tmp_path / "good.safetensors"
    reference.save(good)
    out = _tracer("steps", "--check", str(good), "--model", str(LLAMA), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ok"] and data["missing"] == [] and data["steps"] == len(reference.steps)
    bad = tmp_path / "bad.safetensors"
    write_safetensors(bad, {"blocks.0.attn.hook_q": np.zeros((1, 3, 4, 8), np.float32)}, {})
    out = _tracer("steps", "--check", str(bad))
    assert out.returncode == 1 and "not tracer step names" in out.stdout and "hook_q" in out.stdout
    out = _tracer("steps", "--model", str(LLAMA))
    assert out.returncode == 2 and out.stderr.startswith("error:")
