"""--allow-long against transformers: past max_position_embeddings, tracer computes what transformers computes
(rotary positions from the ids, T5's buckets from distances), and both traces record the warning."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import model_dir
from long_prompts import DEFAULT, prompt_for
from tracer.cli.main import app
from tracer.trace import Trace

runner = CliRunner()


def cli(*args, code: int = 0):
    result = runner.invoke(app, [*map(str, args)], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == code, result.output
    return result


@pytest.mark.live
@pytest.mark.parametrize("folder, inputs, first, last", [
    (DEFAULT, [prompt_for(300)], 128, 299),  # rotary, 128 positions
    (model_dir("t5"), ["--ids", ",".join(str(5 + i % 40) for i in range(70))], 64, 69),  # relative, tokenizer says 64
])
def test_capture_past_the_limit_matches_tracer(folder, inputs, first, last, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    hf = tmp_path / "hf.safetensors"
    cli("capture", folder, *inputs, "-o", hf, "--allow-long")
    (w,) = Trace.load(hf).meta["warnings"]
    assert (w["data"]["first"], w["data"]["last"]) == (first, last)
    data = json.loads(cli("diff", hf, folder, "--allow-long", "--json").stdout)
    assert data["verdict"] == "match", data["first_divergence"]
    assert data["counts"]["pass"] > 10
    assert [x["side"] for x in data["warnings"]] == ["reference", "mine"]
