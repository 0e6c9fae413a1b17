"""80 and 120 columns (NO_COLOR): tables keep their words and numbers whole (issue 16)."""

from __future__ import annotations

import re

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from conftest import model_dir
from tracer.cli.main import app
from tracer.steps import CATALOGUE

runner = CliRunner()
LONG = "The quick brown fox jumps over the lazy dog while the small cat sleeps on the warm mat near the old door"


def invoke(*args, columns):
    r = runner.invoke(app, [*map(str, args)], env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= columns
    return r.stdout


@pytest.mark.parametrize("columns", [80, 120])
def test_bert_tokens_keep_one_line_per_token(columns):
    out = invoke("run", "--model", model_dir("bert"), "春天来了 café naïve", "--only", "tokens", columns=columns)
    lines = out.splitlines()
    rows = lines[next(i for i, line in enumerate(lines) if line.startswith("pos ")) + 2:]
    rows = rows[:next((i for i, line in enumerate(rows) if line.startswith("␣ = ")), len(rows))]
    spans = [line for line in rows if re.match(r"\s*\d+\s+\d+\s", line)]
    assert len(spans) == 15
    assert len(rows) <= 15 + 1 + 1  # a long kind may wrap once; the spans never do (~55 lines before)
    assert all(re.search(r"\S  \d+:\d+|\(added\)", line) for line in spans)  # `a  6:7` whole on its token's line


def _entries(out):
    return re.findall(r"\b\d+ (\S+) (1\.0|\.\d\d|\S*…)(?=\s|$)", out)


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("args", [("--attn-top", "6", "--head", "0"), ("--head", "0"), ()])
def test_attention_top_k_entries_keep_their_weights(columns, args):
    out = invoke("run", LONG, "--only", "attention", *args, columns=columns)
    if "Per query" in out or "Per head" in out:
        entries = _entries(out)
        assert entries and all(not w.endswith("…") for _, w in entries), entries  # weights were cut to `.…`
    if columns >= 120 and "--attn-top" in args:
        assert "␣small .34" in out  # a label is cut only when the width needs it (it was `␣sm…` at any width)


@pytest.mark.parametrize("columns", [97, 120, 121, 125, 150])  # widths of 4k + 1 overflowed by a cell
def test_one_heads_window_keeps_each_rows_checked_sum(columns):
    out = invoke("run", LONG, "--only", "attention", "--head", "0", columns=columns)
    assert "query ↓ key →" in out  # the windowed grid, not the top-k list
    rows = [line for line in out.splitlines() if re.match(r"\s*\d+ \S+\s+(1\.0|\.\d\d| · )", line)]
    assert rows and all(line.rstrip().endswith("✓") for line in rows)


def test_mlm_labels_are_whole_at_120_columns():
    out = invoke("run", "--model", model_dir("bert-mlm"), "The capital of France is [MASK] and it is nice",
                 "--only", "attention", columns=120)
    assert "17 [MASK] ." in out and "[MA…" not in out


@pytest.mark.parametrize("columns", [80, 120])
def test_tracer_steps_gives_the_descriptions_room(columns):
    out = invoke("steps", columns=columns)
    assert len(out.splitlines()) <= 2.5 * len(CATALOGUE)  # 235 lines at 80 columns before
    for d in CATALOGUE[:10]:  # every name whole, on a line of its own cell
        assert re.search(rf"^{re.escape(d.template)}\s", out, re.M), d.template


@pytest.mark.parametrize("command", ["run", "generate", "diff", "mask", "cost", "steps", "report", "capture"])
def test_help_shows_no_python_annotations(command):
    out = invoke(command, "--help", columns=120)
    assert not re.search(r"<(bool|str|int|float|path|list\[\w+\])( range)?>", out), command
