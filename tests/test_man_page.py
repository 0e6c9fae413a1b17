"""The man page documents every command, every option and every step name."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from tracer.cli.main import app
from tracer.steps import CATALOGUE

MAN = Path(__file__).resolve().parents[1] / "man" / "tracer.1"


def _man_text() -> str:
    text = MAN.read_text(encoding="utf-8")
    text = re.sub(r"\\f[BIRP]", " ", text)  # font changes would glue words to option names
    return text.replace("\\-", "-").replace("\\(em", "-").replace("\\&", "")


def _commands():
    group = typer.main.get_command(app)
    return group.commands


def test_every_command_and_option_is_documented():
    text = _man_text()
    missing = []
    for name, cmd in _commands().items():
        if not re.search(rf"\btracer {re.escape(name)}\b", text):
            missing.append(f"command {name}")
        for param in cmd.params:
            for opt in getattr(param, "opts", []) + getattr(param, "secondary_opts", []):
                if opt.startswith("-") and opt not in ("--help",) and not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text):
                    missing.append(f"{name} {opt}")
    assert not missing, f"not in man/tracer.1: {missing}"


def test_every_step_name_and_its_axes_are_documented():
    text = _man_text()
    for doc in CATALOGUE:
        assert doc.template in text, doc.template
        assert ", ".join(doc.axes) in text, f"axes of {doc.template}"


def test_exit_codes_section():
    text = _man_text()
    assert ".SH EXIT STATUS" in MAN.read_text(encoding="utf-8")
    for code in ("0", "1", "2"):
        assert re.search(rf"^\.IP {code}\b|^\.TP\n\.B {code}\b", text, re.M) or f"\n{code} " in text


@pytest.mark.skipif(shutil.which("groff") is None and shutil.which("mandoc") is None, reason="no roff renderer here")
def test_man_page_renders_without_warnings():
    tool = ["groff", "-k", "-man", "-Tutf8", "-ww", "-z"] if shutil.which("groff") else ["mandoc", "-Tlint"]
    result = subprocess.run(tool + [str(MAN)], capture_output=True, text=True)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_step_names_section_is_generated_from_the_catalogue():
    """man/update_steps.py writes STEP NAMES from tracer.steps; the page must match what it would write."""
    result = subprocess.run([sys.executable, str(MAN.parent / "update_steps.py"), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_pitfall_code_the_mask_lab_cites_is_defined_in_the_man_page():
    from tracer.masks.pitfalls import CODE, PITFALLS

    src = Path(__file__).resolve().parents[1] / "src" / "tracer"
    used = {f"P{m}" for path in src.rglob("*.py") for m in CODE.findall(path.read_text(encoding="utf-8"))}
    assert {"P1", "P3", "P6"} <= used and used <= set(PITFALLS)
    man = _man_text()
    for code, meaning in PITFALLS.items():
        assert re.search(rf"^\.B {code}\n{re.escape(meaning)}\.$", man, re.M), code
