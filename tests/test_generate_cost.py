"""`tracer generate --cost`: each pass's FLOPs with the cache, beside the same token computed without one."""

import json

import pytest
from typer.testing import CliRunner

from conftest import model_dir
from tracer import load_model
from tracer.cli.main import app
from tracer.cost.counts import Pass
from tracer.cost.routes import pass_costs
from tracer.cost.summary import totals

runner = CliRunner()


def costs_of(*args: str) -> tuple[dict, list[dict]]:
    result = runner.invoke(app, ["generate", *args, "--cost", "--json"], env={"NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    return data, data["cost"]


def test_cached_steps_cost_the_same_but_for_attention_and_uncached_ones_grow():
    folder = model_dir("llama")
    data, costs = costs_of("--model", str(folder), "--ids", "5,17,42,8", "--max-new-tokens", "5", "--ignore-eos")
    spec = load_model(folder).spec
    assert [c["t"] for c in costs] == list(range(5)) and costs[0]["new_positions"] == 4  # the prefill gives token 1
    decoding = costs[1:]
    assert all(c["new_positions"] == 1 for c in decoding)
    assert [c["keys"] for c in decoding] == [5, 6, 7, 8]
    rest = {c["flops"] - c["attention_pair_flops"] for c in decoding}
    assert len(rest) == 1, "everything but attention's q·k and w·v costs the same at every step"
    growth = {b["attention_pair_flops"] - a["attention_pair_flops"] for a, b in zip(decoding, decoding[1:])}
    assert len(growth) == 1 and growth.pop() > 0, "attention's pair FLOPs grow by the same amount per key"
    for c in costs:  # without a cache: the whole sequence so far, as a prefill of that length would cost
        assert c["uncached_flops"] == totals(pass_costs(spec, Pass(1, c["keys"], 0, 4)))["flops"]
    ratios = [c["uncached_flops"] / c["flops"] for c in decoding]
    assert ratios == sorted(ratios) and ratios[0] > 1


def test_encoder_decoder_runs_the_encoder_once():
    folder = model_dir("t5")
    _, costs = costs_of("--model", str(folder), "--ids", "5,17,42,8,9,10", "--max-new-tokens", "3", "--ignore-eos")
    spec = load_model(folder).spec
    prefill, first = costs[0], costs[1]
    encoder = totals([c for c in pass_costs(spec, Pass(1, 1, 0, 4, memory_len=6)) if c.name.startswith("encoder.")])
    assert encoder["flops"] > 0
    assert prefill["flops"] > encoder["flops"], "the prefill runs the encoder"
    assert first["uncached_flops"] - first["flops"] > encoder["flops"], "a step without a cache runs the encoder again"


def test_screen_shows_the_cost_section():
    result = runner.invoke(app, ["generate", "春天来", "--max-new-tokens", "3", "--cost"],
                           env={"NO_COLOR": "1", "COLUMNS": "110"})
    assert result.exit_code == 0, result.output
    assert "Cost per pass" in result.output and "without (" in result.output
