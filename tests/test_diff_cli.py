"""`tracer diff` and `tracer capture` on the command line: exit codes, output order, JSON, errors."""

import json
from pathlib import Path

import numpy as np
import pytest
from diff_toy import toy_trace, toy_weights
from safetensors.numpy import save_file
from typer.testing import CliRunner

from tracer.cli import capture_cmd
from tracer.cli.main import app

runner = CliRunner()
IDS = [[3, 1, 4, 1, 5]]


@pytest.fixture
def traces(tmp_path):
    ref = toy_trace(IDS).save(tmp_path / "ref.safetensors")
    same = toy_trace(IDS).save(tmp_path / "same.safetensors")
    w = toy_weights()
    w["0.W_in"] = w["0.W_in"] * np.float32(1.1)
    other = toy_trace(IDS, w).save(tmp_path / "other.safetensors")
    return ref, same, other


def _run(*args):
    return runner.invoke(app, ["diff", *map(str, args)], env={"COLUMNS": "100", "NO_COLOR": "1"})


def test_identical_files_exit_zero_and_say_so_first(traces):
    ref, same, _ = traces
    result = _run(ref, same)
    assert result.exit_code == 0, result.output
    assert result.output.lstrip().startswith("✓ MATCH")
    assert "\x1b[" not in result.output  # NO_COLOR


def test_divergence_exits_one_with_verdict_then_first_divergence_then_profile_then_table(traces):
    ref, _, other = traces
    result = _run(ref, other)
    assert result.exit_code == 1, result.output
    out = result.output
    assert out.lstrip().startswith("✗ DIVERGED")
    order = [out.index("First divergence: blocks.0.mlp.pre"), out.index("Error by block"), out.index("Steps")]
    assert order == sorted(order)


def test_json_output(traces):
    ref, _, other = traces
    result = _run(ref, other, "--json")
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["first_divergence"]["step"] == "blocks.0.mlp.pre"
    assert out["first_divergence"]["reason"] == "numeric"
    assert all({"name", "status", "metrics"} <= set(s) for s in out["steps"])
    assert len(out["steps"]) == len(toy_trace(IDS).steps)


def test_tolerances_and_step_globs(traces):
    ref, _, other = traces
    loose = _run(ref, other, "--rtol", "10", "--atol", "10", "--json")
    assert loose.exit_code == 0 and json.loads(loose.stdout)["first_divergence"] is None
    only_attn = _run(ref, other, "--steps", "blocks.*.attn.*", "--json")
    out = json.loads(only_attn.stdout)
    assert out["steps"] and all(".attn." in s["name"] for s in out["steps"])
    assert out["first_divergence"]["step"] == "blocks.1.attn.q"  # block 0's attention comes before its MLP change


def test_all_shows_every_step(traces):
    ref, _, other = traces
    short, full = _run(ref, other), _run(ref, other, "--all")
    assert "blocks.1.attn.k " not in short.output and "blocks.1.attn.k " in full.output
    assert "hidden" in short.output and "hidden" not in full.output


def test_names_option_on_the_command_line(tmp_path, traces):
    ref, _, _ = traces
    t = toy_trace(IDS)
    dump = {"blocks.0.attn.hook_q": np.ascontiguousarray(t["blocks.0.attn.q"].transpose(0, 2, 1, 3)),
            "blocks.0.hook_resid_post": t["blocks.0.resid_post"]}
    save_file(dump, str(tmp_path / "tl.safetensors"))
    assert _run(ref, tmp_path / "tl.safetensors", "--names", "tl").exit_code == 0
    nothing = _run(ref, tmp_path / "tl.safetensors")
    assert nothing.exit_code == 2 and "--names" in nothing.output


def test_injected_nan_is_named_on_the_command_line(tmp_path, traces):
    ref, _, _ = traces
    t = toy_trace(IDS)
    dump = {s.name: s.array for s in t.steps}
    dump["blocks.1.mlp.post"] = dump["blocks.1.mlp.post"].copy()
    dump["blocks.1.mlp.post"][0, 2, 3] = np.inf
    save_file({k: np.ascontiguousarray(v) for k, v in dump.items()}, str(tmp_path / "nan.safetensors"))
    out = json.loads(_run(ref, tmp_path / "nan.safetensors", "--json").stdout)
    assert out["first_divergence"] == {**out["first_divergence"], "step": "blocks.1.mlp.post", "reason": "nan/inf"}


@pytest.mark.parametrize("make_args", [
    lambda d: [d / "nope.safetensors", d / "ref.safetensors"],
    lambda d: [d / "ref.safetensors", d / "garbage.safetensors"],
    lambda d: [d / "ref.safetensors", d / "ref.safetensors", "some text"],
    lambda d: [d / "ref.safetensors", d / "ref.safetensors", "--atol", "-1"],
])
def test_errors_exit_two_with_one_line(tmp_path, traces, make_args):
    (tmp_path / "garbage.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{not json")
    result = _run(*make_args(tmp_path))
    assert result.exit_code == 2
    assert "error:" in result.output and "Traceback" not in result.output


def test_capture_without_torch_says_what_to_install(tmp_path, monkeypatch):
    real = capture_cmd.importlib.util.find_spec
    monkeypatch.setattr(capture_cmd.importlib.util, "find_spec", lambda name: None if name == "torch" else real(name))
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "llama"  # valid input: only torch is missing
    result = runner.invoke(app, ["capture", str(folder), "hi", "-o", str(tmp_path / "x.safetensors")])
    assert result.exit_code == 2
    assert "tracer capture needs torch and transformers" in result.output
    # the hint installs the extra from this checkout: 'tracer[torch]' would fetch PyPI's unrelated 'tracer'
    assert "pip install -e '.[torch]'" in result.output and "'tracer[torch]'" not in result.output
    assert not (tmp_path / "x.safetensors").exists()


def test_capture_needs_an_output_and_an_input(tmp_path):
    assert runner.invoke(app, ["capture", str(tmp_path), "hi"]).exit_code == 2
    result = runner.invoke(app, ["capture", str(tmp_path), "-o", str(tmp_path / "x.safetensors")])
    assert result.exit_code == 2 and "nothing to run" in result.output


def test_same_ids_runs_both_models_on_the_references_tokenization():
    from conftest import model_dir

    runner = CliRunner()
    llama, qwen2 = str(model_dir("llama")), str(model_dir("qwen2"))
    apart = runner.invoke(app, ["diff", llama, qwen2, "hello world", "--json"])
    assert apart.exit_code == 1 and json.loads(apart.stdout)["verdict"] == "inputs differ"  # qwen2 adds no BOS
    same = runner.invoke(app, ["diff", llama, qwen2, "hello world", "--same-ids", "--json"])
    assert same.exit_code == 1, same.output  # compared, and two different models diverge
    data = json.loads(same.stdout)
    assert data["first_divergence"] is not None and "inputs" not in data
    alone = runner.invoke(app, ["diff", llama, llama, "--ids", "1,2", "--same-ids"])
    assert alone.exit_code == 2 and "give TEXT" in alone.output
