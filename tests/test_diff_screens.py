"""`tracer diff` for people: decoded pieces, small changes that show, whole step names, different inputs said first."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from rich.cells import cell_len
from safetensors.numpy import load_file, save_file
from typer.testing import CliRunner

from long_prompts import DEFAULT
from tracer.cli.main import app

runner = CliRunner()


def diff(*args, columns: int = 80):
    return runner.invoke(app, ["diff", *map(str, args)], env={"COLUMNS": str(columns), "NO_COLOR": "1"})


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The shipped model and a copy whose block-1 MLP down projection is scaled by 1.0005."""
    root = tmp_path_factory.mktemp("diff")
    a, b = root / "dm1", root / "dm2"
    shutil.copytree(DEFAULT, a)
    shutil.copytree(DEFAULT, b)
    w = load_file(b / "model.safetensors")
    name = next(n for n in w if "layers.1.mlp.down" in n)
    w[name] = (w[name] * np.float32(1.0005)).astype(w[name].dtype)
    save_file(w, b / "model.safetensors", metadata={"format": "pt"})
    return a, b


@pytest.fixture(scope="module")
def folder_diff(folders):
    return {c: diff(*folders, "春天来", "--all", columns=c) for c in (80, 150)}


@pytest.mark.parametrize("columns", [80, 150])
def test_moved_tokens_are_decoded_pieces_with_changes_that_show(folder_diff, columns):
    r = folder_diff[columns]
    assert r.exit_code == 1, r.output
    out = r.stdout
    assert "æ" not in out and "Ġ" not in out  # no byte-level mojibake
    block = out[out.index("tokens that moved most") :].splitlines()
    rows = [line.split() for line in block[2:8] if re.match(r"^\s{4}\S+\s+\d+\s", line)]
    assert len(rows) == 5
    assert any(r[0] == "游" for r in rows)
    changes = [float(r[-1]) for r in rows]
    assert all(c != 0.0 for c in changes)  # 4.6e-07 -> 4.7e-07 is not printed as +0.000
    refs, mines = [float(r[2]) for r in rows], [float(r[3]) for r in rows]
    assert all(abs((m - f) - c) <= 0.02 * abs(c) + 1e-12 for f, m, c in zip(refs, mines, changes)) or all(
        abs(c) < 1e-9 for c in changes)


@pytest.mark.parametrize("columns", [80, 150])
def test_step_names_are_never_wrapped(folders, folder_diff, columns):
    out = folder_diff[columns].stdout
    lines = out.splitlines()
    assert max(cell_len(line) for line in lines) <= columns
    data = json.loads(diff(*folders, "春天来", "--json").stdout)
    words = set(out.split())
    for step in data["steps"]:
        assert step["name"] in words, step["name"]
    profile = out[out.index("Error by block") : out.index("Next-token")]
    for b in data["blocks"]:
        name = b.get("first_failure") or b.get("worst_step")
        if name:
            assert re.search(rf"(^|[\s(]){re.escape(name)}(\)|\s|$)", profile, re.M), name


@pytest.fixture(scope="module")
def two_prompts(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    paths = {}
    for name, prompt in (("a", "春天来"), ("b", "秋天去"), ("c", "Hello")):
        paths[name] = root / f"{name}.safetensors"
        r = runner.invoke(app, ["run", prompt, "--save", str(paths[name]), "--only", "model"])
        assert r.exit_code == 0, r.output
    return paths


@pytest.mark.parametrize("columns", [80, 150])
def test_different_inputs_are_said_first_and_only_the_shared_prefix_is_compared(two_prompts, columns):
    r = diff(two_prompts["a"], two_prompts["b"], columns=columns)
    assert r.exit_code == 1, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "≠ THE INPUTS DIFFER"
    said = " ".join(lines[1:6])
    assert said.index("'春天来'") < said.index("'秋天去'")
    assert "only position 0" in r.stdout
    assert "first at input.ids" not in r.stdout
    data = json.loads(diff(two_prompts["a"], two_prompts["b"], "--json").stdout)
    assert data["verdict"] == "inputs differ" and data["inputs"]["compared_positions"] == 1
    ids = next(s for s in data["steps"] if s["name"] == "input.ids")
    assert ids["status"] == "pass" and ids["ref_shape"] == [1, 1]


def test_a_shared_prefix_of_a_shorter_prompt_is_compared(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    for path, prompt in ((a, "春天来了"), (b, "春天来")):
        assert runner.invoke(app, ["run", prompt, "--save", str(path), "--only", "model"]).exit_code == 0
    data = json.loads(diff(a, b, "--json").stdout)
    assert data["inputs"]["compared_positions"] == 4 and data["first_divergence"] is None


def test_inputs_that_differ_from_the_first_token_are_refused(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    assert runner.invoke(app, ["run", "--ids", "5,6,7", "--save", str(a), "--only", "model"]).exit_code == 0
    assert runner.invoke(app, ["run", "--ids", "8,6,7", "--save", str(b), "--only", "model"]).exit_code == 0
    r = diff(a, b)
    assert r.exit_code == 2 and r.output.startswith("error: the inputs differ")
    assert "nothing is comparable" in r.output and "Traceback" not in r.output


def test_same_inputs_are_not_flagged(two_prompts):
    r = diff(two_prompts["a"], two_prompts["a"])
    assert r.exit_code == 0 and "INPUTS DIFFER" not in r.stdout


def test_the_diff_page_says_the_inputs_differ_and_is_confirmed(two_prompts, tmp_path):
    page = tmp_path / "d.html"
    r = runner.invoke(app, ["diff", str(two_prompts["a"]), str(two_prompts["b"]), "--export-html", str(page)])
    assert r.exit_code == 1
    html = page.read_text(encoding="utf-8")
    assert 'class="bad">INPUTS DIFFER' in html and "the inputs differ" in html
    assert f"wrote the page to {page}" in r.stderr
