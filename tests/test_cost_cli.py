"""`tracer cost` on the command line, and `tracer run --cost` with the Recorder's clock."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import model_dir
from tracer.checkpoint.config import read_config
from tracer.cli.main import app
from tracer.cost.counts import Pass
from tracer.cost.routes import pass_costs
from tracer.cost.params import parameter_groups
from tracer.trace import Recorder, Trace

runner = CliRunner()


def invoke(*args, columns: int = 120, **env):
    return runner.invoke(app, [*map(str, args)], env={"COLUMNS": str(columns), **env})


def strict_json(text: str) -> dict:
    def reject(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=reject)


def test_json_is_strict_and_agrees_with_the_counts():
    folder = model_dir("qwen2")
    result = invoke("cost", "--model", folder, "--tokens", "4,16", "--batch", "2", "--dtype", "bfloat16", "--json")
    assert result.exit_code == 0, result.output
    data = strict_json(result.stdout)
    assert data["itemsize"] == 2 and data["batch"] == 2 and data["tokens"] == [4, 16]
    assert data["parameters"]["total"] == 40352  # the fixture's float tensors (see test_cost_counts)
    assert [g["tokens"] for g in data["growth"]] == [4, 16]
    assert data["kv_cache"]["at"][1]["bytes"] == 2 * (16 + 16 + 3) * (2 * 2 * 8) * 2  # last layer windowed at 3
    rows = {r["step"]: r for r in data["steps"]["rows"]}
    assert rows["blocks.{i}.attn.q"]["layers"] == 3
    from tracer.cli.cost_cmd import spec_from_path

    spec, _ = spec_from_path(folder)
    counted = sum(c.flops for c in pass_costs(spec, Pass(2, 4, itemsize=2)))
    assert data["passes"]["prefill"]["flops"] == counted


def test_screen_has_every_section_and_no_escapes_under_no_color():
    result = invoke("cost", "--model", model_dir("gpt2"), "--tokens", "8,100", columns=80, NO_COLOR="1")
    assert result.exit_code == 0, result.output
    out = result.stdout
    titles = re.findall(r"^ \d+ · (.+?)\s+─", out, re.M)
    assert [t.split("  ")[0] for t in titles] == ["Model", "Parameters", "Each step at 8 tokens",
                                                  "Prefill against one decoding step at position 8", "Growth with the length"]
    assert "\x1b[" not in out
    assert "past the model's position table of 64 rows" in out  # 100 > n_positions: GPT-2's table ends there
    assert max(len(line) for line in out.splitlines()) <= 80


def test_a_config_file_alone_is_enough(tmp_path):
    cfg, _ = read_config(model_dir("llama"))
    (tmp_path / "my-config.json").write_text(json.dumps(cfg))
    result = invoke("cost", "--model", tmp_path / "my-config.json", "--json")
    assert result.exit_code == 0, result.output
    assert strict_json(result.stdout)["parameters"]["total"] == 43168


def test_the_shipped_model_by_default():
    result = invoke("cost", "--json")
    assert result.exit_code == 0, result.output
    assert strict_json(result.stdout)["tokens"] == [128, 1024, 8192]


@pytest.mark.parametrize("args, message", [
    (("--tokens", "12,abc"), "--tokens: 'abc' is not an integer"),
    (("--tokens", "0"), "--tokens: 0 is not a positive length"),
    (("--tokens", ""), "--tokens is empty"),
    (("--batch", "0"), "--batch must be at least 1"),
    (("--dtype", "int8"), "--dtype 'int8' is not one of"),
    (("--model", "/no/such/folder"), "no such checkpoint folder"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = invoke("cost", *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.stderr


# ---------- the Recorder's clock and tracer run --cost ----------

def test_the_clock_times_the_engine_between_steps_and_is_never_saved(tmp_path):
    ticks = itertools.count(0.0, 0.5)  # every reading advances half a second
    timed = Recorder(clock=lambda: next(ticks))
    plain = Recorder()
    for rec in (timed, plain):
        rec("a", np.ones(3, np.float32), ("x",), "one")
        rec("b", np.zeros(3, np.float32), ("x",), "two")
    # first step 0; then: arrival at 1.0 (readings 0.0 arrival a, 0.5 leaving a) -> 1.0 - 0.5
    assert [s.seconds for s in timed.steps] == [0.0, 0.5]
    assert all(s.seconds is None for s in plain.steps)
    a = Trace(timed.steps, {"x": 1}).save(tmp_path / "timed.safetensors")
    b = Trace(plain.steps, {"x": 1}).save(tmp_path / "plain.safetensors")
    assert a.read_bytes() == b.read_bytes()


def test_run_cost_puts_time_beside_flops():
    folder = model_dir("llama")
    result = invoke("run", "--model", folder, "--ids", "5,17,42,7", "--cost", "--json")
    assert result.exit_code == 0, result.output
    cost = strict_json(result.stdout)["cost"]
    rows = {r["step"]: r for r in cost["rows"]}
    from tracer.cli.cost_cmd import spec_from_path

    spec, _ = spec_from_path(folder)
    counted = {c.name: c.flops for c in pass_costs(spec, Pass(1, 4, dense=True))}
    assert rows["logits"]["flops"] == counted["logits"]
    assert rows["blocks.{i}.attn.scores"]["flops"] == sum(v for k, v in counted.items() if k.endswith("attn.scores"))
    assert rows["blocks.{i}.attn.mask"]["flops"] is None and rows["input.ids"]["seconds"] == 0.0
    assert all(r["seconds"] >= 0 for r in cost["rows"]) and cost["total_seconds"] > 0
    assert len(cost["slowest"]) == 3 and set(cost["slowest"]) <= set(rows)
    assert abs(sum(r["time_share"] for r in cost["rows"]) - 1) < 1e-9
    assert sum(parameter_groups(spec).values()) == 43168


def test_run_without_cost_has_no_cost_section():
    result = invoke("run", "--model", model_dir("llama"), "--ids", "5,17", "--json")
    assert "cost" not in strict_json(result.stdout)


def test_run_cost_screen_marks_the_slow_steps():
    result = invoke("run", "--model", model_dir("gpt2"), "--ids", "5,17,42", "--cost", "--only", "cost", NO_COLOR="1")
    assert result.exit_code == 0, result.output
    assert "Cost: time and FLOPs per step" in result.stdout
    assert result.stdout.count("◀ slow") == 3


def test_run_cost_on_a_route_not_counted_still_times_the_steps():
    from dataclasses import replace

    from tracer.model.model import load_model
    from tracer.report.cost import measured_cost

    m = load_model(model_dir("gpt2"))
    trace = m.run(ids=[[5, 17, 42]], clock=lambda: 1.0)
    section = measured_cost(trace, replace(m.spec, route="mixture-of-experts"))
    assert section["rows"] and all(r["flops"] is None for r in section["rows"])
    assert "does not count the mixture-of-experts route yet" in section["note"]


def test_narrow_terminals_keep_the_essential_columns():
    wide = invoke("cost", "--model", model_dir("gpt2"), "--tokens", "16", columns=120, NO_COLOR="1").stdout
    narrow = invoke("cost", "--model", model_dir("gpt2"), "--tokens", "16", columns=60, NO_COLOR="1").stdout
    header = re.compile(r"^ step\s.*FLOPs.*$", re.M)
    assert "MACs" in header.search(wide).group(0) and "MACs" not in header.search(narrow).group(0)
    assert "A wider terminal adds MACs and bytes written" in " ".join(narrow.split())
    assert max(len(line) for line in narrow.splitlines()) <= 60
    assert re.search(r"^ blocks\.\{i\}\.attn\.scores\s", narrow, re.M)  # step names stay whole


def test_run_cost_on_the_html_page(tmp_path):
    page = tmp_path / "run.html"
    result = invoke("run", "--model", model_dir("llama"), "--ids", "5,17,42", "--cost", "--only", "model,cost",
                    "--export-html", page)
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert "cost: time and FLOPs per step" in text and text.count('<tr class="target">') == 3
    assert "blocks.{i}.mlp.pre" in text
