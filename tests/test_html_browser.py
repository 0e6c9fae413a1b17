"""The HTML report in a real browser (Debian's headless chromium): it loads without script errors, the heatmaps
are laid out at their sizes with their labels, and a screenshot is not an empty page."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from conftest import model_dir
from html_tree import parse
from pngread import colour_summary
from tracer.cli.main import app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does)")]
runner = CliRunner()


def chromium(tmp_path, page, *args, name="run"):
    profile = tmp_path / f"profile-{name}"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args, page.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def script_errors(stderr: str) -> list[str]:
    """Console lines: the page logs nothing, so any one (an uncaught error, a failed load) is a fault."""
    return [line for line in stderr.splitlines() if "Uncaught" in line or re.search(r":CONSOLE[:(]", line)]


@pytest.fixture(scope="module")
def run_page(tmp_path_factory):
    page = tmp_path_factory.mktemp("page") / "run.html"
    result = runner.invoke(app, ["run", "春天来", "--lens", "--export-html", str(page)])
    assert result.exit_code == 0, result.output
    return page


def test_the_error_check_sees_a_script_error(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>notDefined();</script></body></html>")
    result = chromium(tmp_path, bad, "--dump-dom", name="bad")
    assert any("Uncaught ReferenceError" in line for line in script_errors(result.stderr)), result.stderr[-2000:]


def test_run_page_loads_without_errors_and_lays_out_every_heatmap(tmp_path, run_page):
    result = chromium(tmp_path, run_page, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    assert script_errors(result.stderr) == []
    source, _ = parse(run_page.read_text(encoding="utf-8"))
    dom, _ = parse(result.stdout)
    maps = dom.find_all("svg", cls="heatmap")
    assert len(maps) == len(source.find_all("svg", cls="heatmap")) > 0
    html = dom.find_all("html")[0]
    assert html.attrs.get("data-ready") == str(len(maps))  # the script ran to its end
    # 3 layers x 4 heads of the shipped model, each 4 x 4 cells, drawn at the size they declare
    attention = [s for s in maps if "data-layer" in s.attrs]
    assert len(attention) == 12
    for svg in attention:
        assert len(svg.find_all("rect", cls="cell")) == 16
        assert svg.attrs["data-drawn"] == f'{svg.attrs["width"]}x{svg.attrs["height"]}'
    labels = [t.text() for t in attention[0].find_all("text") if t.attrs.get("text-anchor") == "end"]
    assert labels == ["0 <s>", "1 春", "2 天", "3 来"]
    lens = dom.find_all("svg", data_lens="1")[0]
    assert lens.attrs["data-drawn"] != "0x0" and len(lens.find_all("rect", cls="cell")) == 4 * 4


def test_screenshot_of_the_report_is_not_an_empty_page(tmp_path, run_page):
    shot = tmp_path / "run.png"
    result = chromium(tmp_path, run_page, f"--screenshot={shot}", "--window-size=1200,2000")
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    top, colours, dark = colour_summary(shot)
    assert top < 0.95 and colours > 20 and dark > 0.003, (top, colours, dark)
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    blank_shot = tmp_path / "blank.png"
    chromium(tmp_path, blank, f"--screenshot={blank_shot}", "--window-size=1200,2000", name="blank")
    assert colour_summary(blank_shot)[0] > 0.99  # the check tells an empty page from a report


def test_diff_page_loads_and_draws_the_chart(tmp_path):
    page = tmp_path / "diff.html"
    result = runner.invoke(app, ["diff", str(model_dir("llama")), str(model_dir("mistral")), "--ids", "1,2,3",
                                 "--export-html", str(page)])
    assert result.exit_code == 1, result.output
    shown = chromium(tmp_path, page, "--dump-dom", name="diff")
    assert script_errors(shown.stderr) == []
    dom, _ = parse(shown.stdout)
    chart = dom.find_all("svg", cls="chart")[0]
    width, height = map(int, chart.attrs["data-drawn"].split("x"))
    assert width > 500 and height > 100
    assert len(chart.find_all("line", cls="first")) == 1 and chart.find_all("circle", cls="fail")
