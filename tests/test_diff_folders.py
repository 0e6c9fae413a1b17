"""Two checkpoint folders: activation diff, weight diff, moved tokens; and a folder against a trace file."""

import json
import shutil

import pytest
from conftest import FAMILIES, model_dir
from fixture_tools import perturbed_copy
from safetensors.numpy import load_file, save_file
from typer.testing import CliRunner

from tracer.cli.main import app
from tracer.diff.weights import diff_weights

runner = CliRunner()
PROMPT = "早上好, the cat sleeps."


def _diff_json(*args):
    result = runner.invoke(app, ["diff", *map(str, args), "--json"])
    return result, (json.loads(result.stdout) if result.stdout.strip().startswith("{") else None)


@pytest.mark.parametrize("fixture", ["llama", "llama-sharded"])
def test_perturbed_mlp_weights_diverge_first_at_that_blocks_mlp(tmp_path, fixture):
    ref = model_dir(fixture)
    mine = perturbed_copy(ref, tmp_path / "mine", "model.layers.1.mlp.down_proj.weight")
    result, out = _diff_json(ref, mine, PROMPT)
    assert result.exit_code == 1, result.output
    first = out["first_divergence"]
    assert first["step"] == "blocks.1.mlp.out" and first["reason"] == "numeric"  # down_proj's output
    steps = [s["name"] for s in out["steps"]]
    assert all(s["status"] == "pass" for s in out["steps"][: steps.index(first["step"])])
    assert {"blocks.1.ln2.out", "blocks.1.mlp.post"} <= {s["name"] for s in out["steps"] if s["status"] == "pass"}
    block1 = next(b for b in out["blocks"] if b["block"] == 1)
    assert block1["first_failure"] == first["step"] and block1["introduced"]
    changed = [t for t in out["weights"]["tensors"] if t["status"] != "same"]
    assert [t["name"] for t in changed] == ["model.layers.1.mlp.down_proj.weight"]
    assert out["weights"]["layers"][0]["layer"] == 1  # most changed layer first
    assert 0.01 < changed[0]["rel_change"] < 0.2
    moved = out["moved_tokens"][0]["moved"]
    assert moved and all("piece" in t for t in moved) and abs(moved[0]["delta"]) > 0


def test_a_folder_against_itself_matches_with_exit_zero():
    result, out = _diff_json(model_dir("gpt2"), model_dir("gpt2"), "hello")
    assert result.exit_code == 0, result.output
    assert out["first_divergence"] is None
    assert out["counts"]["fail"] == 0 and out["counts"]["pass"] > 30
    assert all(t["status"] == "same" for t in out["weights"]["tensors"])


def test_two_folders_need_an_input():
    result = runner.invoke(app, ["diff", str(model_dir("gpt2")), str(model_dir("gpt2"))])
    assert result.exit_code == 2
    assert "need an input" in result.output


def test_weight_diff_reads_bf16_and_shards_and_lists_missing_tensors(tmp_path):
    same = diff_weights(model_dir("llama-sharded"), model_dir("llama"))
    assert not same.changed  # same weights, split differently
    bf16 = diff_weights(model_dir("llama"), model_dir("llama-bf16"))
    changed = [t for t in bf16.tensors if t.status == "changed"]
    assert changed and all(t.mine_dtype == "BF16" for t in changed)
    assert all(t.rel_change < 1e-2 for t in changed)  # bf16 rounding: 2^-9 relative per element at most
    fewer = tmp_path / "fewer"
    shutil.copytree(model_dir("llama"), fewer)
    tensors = load_file(str(fewer / "model.safetensors"))
    del tensors["model.norm.weight"]
    save_file(tensors, str(fewer / "model.safetensors"))
    d = diff_weights(model_dir("llama"), fewer)
    assert [(t.name, t.status) for t in d.changed] == [("model.norm.weight", "only-ref")]


@pytest.mark.parametrize("family", FAMILIES)
def test_each_fixture_reference_matches_tracer_on_its_own_input(family):
    """The folder runs on the reference file's own input.ids; transformers' capture is the reference."""
    result, out = _diff_json(model_dir(family) / "reference.safetensors", model_dir(family))
    assert result.exit_code == 0, result.output
    logits = next(s for s in out["steps"] if s["name"] == "logits")
    assert logits["metrics"]["max_abs"] < 1e-4
    assert logits["distribution"]["top1_agreement"] == 1.0


def test_padded_batch_reference_is_rerun_with_the_same_padding():
    result, out = _diff_json(model_dir("gpt2") / "reference_batch.safetensors", model_dir("gpt2"))
    assert result.exit_code == 0, result.output
    assert any("padding position" in n for n in out["notes"])
