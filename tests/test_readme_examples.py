"""Issue 16: the README's and the man page's example commands run as written from the repo root.

Every path an example names (a `--model` folder, a fixture, a file another example of the same block
wrote) must exist, and placeholders are spelled as placeholders (DIR, port.safetensors, ...). The
README's `tracer cost` sample is the command's real output (its lines are found in what the command prints)."""

from __future__ import annotations

import re
import shlex

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from tracer.cli.main import app

README = (ROOT / "README.md").read_text(encoding="utf-8")
MAN = (ROOT / "man" / "tracer.1").read_text(encoding="utf-8")

# names the docs use for the reader's own files and folders: never expected to exist
PLACEHOLDERS = {"DIR", "BERT_DIR", "MINILM_DIR", "T5_DIR", "port.safetensors", "hooks.safetensors", "tl-cache.safetensors",
                "m.npy", "story.txt", "my_port.py", "./my-model", "model/", "port-dump.safetensors",
                "ref.safetensors", "mine.safetensors", "t.safetensors",
                "model-Q4_K_M.gguf", "./hf-folder", "model.onnx", "onnx.safetensors",
                "t5-onnx/", "t5-onnx/encoder_model.onnx"}  # the man page's diff examples: the reader's reference
PATH_OPTIONS = {"--model", "-m", "--mask", "--check-weights"}
# files a command writes (so a later example of the same block may read them)
OUTPUT_OPTIONS = {"--save", "-o", "--output", "--export-html"}


def readme_commands() -> list[list[str]]:
    """The `tracer ...` lines of the README's code blocks, by block, comments dropped."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", README, re.S)
    return [[_strip(line) for line in b.splitlines() if line.lstrip("$ ").startswith("tracer ")] for b in blocks]


def man_commands() -> list[list[str]]:
    blocks = re.findall(r"^\.nf\n(.*?)^\.fi", MAN, re.S | re.M)
    out = []
    for b in blocks:
        lines = [re.sub(r"\\\[u([0-9A-F]{4})\]", lambda m: chr(int(m.group(1), 16)), ln).replace("\\-", "-")
                 for ln in b.splitlines()]
        out.append([_strip(ln) for ln in lines if ln.startswith("tracer ")])
    return out


def _strip(line: str) -> str:
    line = line.lstrip("$ ")
    return re.sub(r"\s+#\s.*$", "", line).strip()


def _paths(words: list[str]) -> list[str]:
    """Arguments that name an input on disk: the option values above, and bare words that look like paths."""
    found = []
    for i, w in enumerate(words[1:], start=1):
        prev = words[i - 1]
        if prev in PATH_OPTIONS:
            found.append(re.sub(r"(\.npz|\.safetensors):.*$", r"\1", w))  # FILE.npz:KEY, TRACE:STEP
        elif prev not in OUTPUT_OPTIONS and not w.startswith("-") and ("/" in w or w.endswith((".safetensors", ".json", ".npy", ".npz"))):
            found.append(w)
    return [p for p in found if not p.startswith("[") and "$(" not in p]


def _missing(blocks: list[list[str]]) -> list[str]:
    problems = []
    for block in blocks:
        written: set[str] = set()
        for cmd in block:
            words = shlex.split(cmd)
            words = words[:words.index(">")] if ">" in words else words  # a shell redirect writes, not reads
            for p in _paths(words):
                if p in PLACEHOLDERS or p in written or (ROOT / p).exists():
                    continue
                problems.append(f"{cmd!r}: {p} does not exist from the repo root")
            written |= {words[i + 1] for i, w in enumerate(words[:-1]) if w in OUTPUT_OPTIONS}
    return problems


def test_readme_examples_name_paths_that_exist_from_the_repo_root():
    blocks = readme_commands()
    assert sum(map(len, blocks)) >= 20
    assert _missing(blocks) == []


def test_man_page_examples_name_paths_that_exist_from_the_repo_root():
    blocks = man_commands()
    assert sum(map(len, blocks)) >= 20
    assert _missing(blocks) == []


def test_the_old_wrong_paths_are_caught():
    assert _missing([["tracer run --model ./bert-mlm 'x'"], ["tracer run --model ./t5 'x' --attn cross"]])


FIXTURE_RUNS = [cmd for block in readme_commands() for cmd in block
                if "fixtures/" in cmd and not any(p in shlex.split(cmd) for p in PLACEHOLDERS)]


@pytest.mark.parametrize("command", FIXTURE_RUNS)
def test_readme_examples_on_the_fixtures_run(command, tmp_path, monkeypatch):
    """The examples that name a fixture run as written (in a folder where fixtures/ is the repo's)."""
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, shlex.split(command)[1:])
    assert r.exit_code in (0, 1), f"{command}\n{r.output}"  # 1: a diff that found a divergence


def test_readme_cost_sample_is_the_commands_output():
    block = next(b for b in re.findall(r"```[a-z]*\n(.*?)```", README, re.S) if b.startswith("$ tracer cost"))
    first, *sample = block.splitlines()
    r = CliRunner().invoke(app, shlex.split(first.lstrip("$ "))[1:], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    printed = " ".join(r.output.split())
    lines = [" ".join(ln.rstrip("─ ").split()) for ln in sample if ln.strip() and ln.strip() != "..."]
    assert len(lines) >= 10
    stale = [ln for ln in lines if ln not in printed]
    assert stale == [], stale
