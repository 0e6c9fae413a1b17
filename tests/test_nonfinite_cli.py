"""A NaN in one weight: `tracer run` and `tracer generate` go on, say so, and exit 0 (README, "NaN/Inf")."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from typer.testing import CliRunner

from tracer.cli.default_model import default_model_path
from tracer.cli.main import app

runner = CliRunner()
POISONED = "model.layers.1.self_attn.v_proj.weight"


@pytest.fixture(scope="module")
def nan_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nan") / "model"
    shutil.copytree(default_model_path(), folder)
    path = folder / "model.safetensors"
    weights = load_file(path)
    w = weights[POISONED].copy()
    w[0, 0] = np.nan
    weights[POISONED] = w
    save_file(weights, path, metadata={"format": "pt"})
    return folder


def invoke(*args, columns=100):
    return runner.invoke(app, [*map(str, args)], env={"COLUMNS": str(columns), "NO_COLOR": "1"})


def test_run_shows_every_section_and_names_the_first_nan(nan_model):
    r = invoke("run", "--model", nan_model, "The cat sat", "--lens")
    assert r.exit_code == 0, r.output
    numbers = re.findall(r"^ (\d) · ", r.stdout, re.M)
    assert numbers == [str(i) for i in range(1, 8)]  # model, tokens, steps, mask, attention, top-k, lens: all there
    assert "NaN first appeared at blocks.1.attn.v" in r.stderr
    # a step whose every value is NaN says so, not "μ 0 σ 0 [0, 0]" (the statistics of no finite value)
    assert "no finite value" in r.stdout and "μ 0 σ 0 [0, 0] 640 NaN" not in r.stdout


def test_generate_says_its_tokens_come_from_nan(nan_model):
    r = invoke("generate", "--model", nan_model, "The cat", "-n", "2")
    assert r.exit_code == 0, r.output
    assert re.search(r"warning: the logits hold NaN", r.stdout)
    j = invoke("generate", "--model", nan_model, "The cat", "-n", "2", "--json")
    assert j.exit_code == 0, j.output
    data = json.loads(j.stdout)
    [w] = [w for w in data["warnings"] if w["code"] == "nonfinite"]
    assert w["data"]["kind"] == "NaN" and w["data"]["steps"] == [0, 1]
    assert data["rows"][0]["steps"][0]["prob"] == "nan"
    assert "warning: the logits hold NaN" in j.stderr


def test_a_finite_generation_has_no_such_warning():
    j = invoke("generate", "The cat", "-n", "2", "--json")
    assert j.exit_code == 0 and not [w for w in json.loads(j.stdout)["warnings"] if w["code"] == "nonfinite"]
