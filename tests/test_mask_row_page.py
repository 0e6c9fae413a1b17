"""tracer mask --row ... --export-html: the page is written only with --row, only when the row is valid."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
from typer.testing import CliRunner

from html_tree import parse
from tracer.cli.main import app

runner = CliRunner()


def test_the_page_holds_the_row_as_the_command_computes_it(tmp_path):
    page = tmp_path / "row.html"
    result = runner.invoke(app, ["mask", "--row", "1.2,2.0,0.4", "--tokens", "猫,追,球", "--query", "1",
                                 "--export-html", str(page), "--json"])
    assert result.exit_code == 0, result.output
    worked = json.loads(result.stdout)
    text = page.read_text(encoding="utf-8")
    tree, errors = parse(text)
    assert errors == []
    data = json.loads(re.search(r'id="tracer-live">(.*?)</script>', text, re.S).group(1))
    layer = data["rows"]["layers"][0]
    scores = np.frombuffer(base64.b64decode(layer["scores"]), dtype="<f8")
    assert scores.tolist() == worked["scores"] == [1.2, 2.0, 0.4]  # float64, exactly the command's numbers
    assert layer["parts"] == {"causal": "110"} and data["rows"]["labels"] == ["猫", "追", "球"]
    assert "tracer mask --row 1.2,2.0,0.4 --tokens 猫,追,球 --query 1" in tree.text()


def test_row_keep_flags_are_a_custom_part(tmp_path):
    page = tmp_path / "row.html"
    assert runner.invoke(app, ["mask", "--row", "1,2,3,4", "--row-keep", "1,0,1,1", "--export-html", str(page)]).exit_code == 0
    data = json.loads(re.search(r'id="tracer-live">(.*?)</script>', page.read_text(encoding="utf-8"), re.S).group(1))
    assert data["rows"]["layers"][0]["parts"] == {"custom": "1011"}


def test_export_html_needs_a_row_and_a_bad_row_writes_nothing(tmp_path):
    page = tmp_path / "row.html"
    result = runner.invoke(app, ["mask", "-c", "hf-2d", "--mask", "[[1,1]]", "--scores", "1,1,2,2", "--export-html", str(page)])
    assert result.exit_code == 2 and "--export-html goes with --row" in result.output and not page.exists()
    result = runner.invoke(app, ["mask", "--row", "1,x", "--export-html", str(page)])
    assert result.exit_code == 2 and not page.exists()
    result = runner.invoke(app, ["mask", "--row", "1,2", "--query", "5", "--export-html", str(page)])
    assert result.exit_code == 2 and not page.exists()
