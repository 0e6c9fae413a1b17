"""`--help` at 80 columns: every example command stays on one line, so it can be copied and pasted."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from tracer.cli import capture_cmd, diff_cmd, generate_cmd, main, mask_cmd, report_cmd, run_cmd, steps_cmd

runner = CliRunner()
SOURCES = {
    "": main.app.info.help, "run": run_cmd.RUN_HELP, "diff": diff_cmd.DIFF_HELP, "mask": mask_cmd.HELP,
    "capture": capture_cmd.CAPTURE_HELP, "report": report_cmd.REPORT_HELP, "steps": steps_cmd.HELP,
    "generate": generate_cmd.GENERATE_HELP,
}


def examples(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("tracer ")]


@pytest.mark.parametrize("command", list(SOURCES))
@pytest.mark.parametrize("columns", [80, 150])
def test_every_example_is_one_whole_line(command, columns):
    wanted = examples(SOURCES[command])
    assert len(wanted) >= 2, "the help has examples"
    result = runner.invoke(main.app, [command, "--help"] if command else ["--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    lines = [re.sub(r"\s+", " ", line.strip(" │")) for line in result.stdout.splitlines()]
    for example in wanted:
        assert re.sub(r"\s+", " ", example) in lines, f"{example!r} is broken at {columns} columns"
