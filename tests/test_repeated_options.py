"""An option that takes one value, given twice, is refused: click would keep the last one silently
(`--decoder-ids 0,5,7 --decoder-ids 0,9` ran both rows on 0,9). Options that take a list repeat."""

import pytest
import typer.main
from typer.testing import CliRunner

from tracer.cli.main import app

runner = CliRunner()
GROUP = typer.main.get_command(app)
SINGLE = [(name, p.opts[0]) for name, cmd in GROUP.commands.items() for p in cmd.params
          if p.param_type_name == "option" and not p.multiple and not p.is_flag]
LISTS = {"run": {"--ids", "--keep", "--steps", "--only", "--token-types", "--decoder-text", "--decoder-ids", "--patch",
                 "--ablate"},
         "generate": {"--ids", "--stop", "--keep"}, "diff": {"--ids", "--steps", "--verdict"}, "report": {"--only"},
         "capture": {"--ids", "--keep", "--decoder-ids", "--token-types"}}


def test_every_command_is_checked():
    assert set(GROUP.commands) == {"run", "report", "generate", "diff", "mask", "capture", "steps", "cost"}
    assert len(SINGLE) > 70  # every single-valued option of every command (the audit of issue 16)


@pytest.mark.parametrize("command,option", SINGLE)
def test_a_single_valued_option_given_twice_is_an_error(command, option):
    result = runner.invoke(app, [command, option, "1", option, "2"])
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[0] == f"error: {option} is given 2 times; it takes one value"
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", sorted(LISTS))
def test_the_options_that_take_a_list_are_the_documented_ones(command):
    cmd = GROUP.commands[command]
    assert {p.opts[0] for p in cmd.params if p.param_type_name == "option" and p.multiple} == LISTS[command]


def test_a_repeated_flag_is_harmless():
    result = runner.invoke(app, ["steps", "--json", "--json"])
    assert result.exit_code == 0, result.output
