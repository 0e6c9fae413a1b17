"""The README and the man page describe the screen as it is: window sizes and legends read from both."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracer.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
MAN = (ROOT / "man" / "tracer.1").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
runner = CliRunner()
PROMPT = " ".join(["cat dog sun"] * 12)  # 38 tokens of the shipped model


def screen(*args):
    r = runner.invoke(app, ["run", PROMPT, *args], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    return r.stdout


ROW = {"Tokens": r"^\s*(\d+) {2,}\d+ {2,}\S", "Mask": r"^\s*(\d+) \S+ +[■·] "}  # `31   341   ␣sun`, `30 ␣dog   ■ ■`


def _rows(out: str, section: str) -> list[int]:
    """The positions a section lists as rows."""
    return [int(m) for m in re.findall(ROW[section], out, re.M)]


@pytest.mark.parametrize("position", [None, 20])
def test_the_tokens_window_is_the_size_the_docs_give(position):
    documented = int(re.search(r"Past 20 tokens the table shows the first token and a window of up to (\d+)", MAN)[1])
    assert f"Past 20 tokens: the first and a window of up to {documented} around" in README
    out = screen("--only", "tokens", *(("--position", str(position)) if position is not None else ()))
    rows = _rows(out, "Tokens")
    assert rows[0] == 0 and 1 < len(rows) - 1 <= documented
    if position is None:
        assert len(rows) - 1 == documented  # at the end of the prompt the window is full


def test_the_mask_window_is_the_size_the_docs_give():
    documented = int(re.search(r"of up to (\d+) queries around", MAN)[1])
    rows = _rows(screen("--only", "mask"), "Mask")
    assert rows[0] == 0 and len(rows) - 1 == documented


def test_the_cache_legend_reads_as_the_man_page_says():
    legend = re.search(r"the cache slots the new query sees per row \((.*?)\)", MAN.replace("\n", " "), re.S)[1]
    legend = legend.replace("\\[u25A0]", "■").replace("\\(pc", "·").replace("\\(mu", "×")
    r = runner.invoke(app, ["generate", "The cat", "-n", "2"], env={"COLUMNS": "100", "NO_COLOR": "1"})
    line = next(line for line in r.stdout.splitlines() if "padding (left)" in line)
    for part in ("■ seen", "· padding"):
        assert part in legend and part in line, (part, legend, line)
