"""One-way imports: the engine and the computing layers know nothing of rich, typer, torch or transformers."""

import subprocess
import sys

CORE = ["tracer.api", "tracer.model", "tracer.engine.forward", "tracer.trace", "tracer.masks.conventions",
        "tracer.masks.row", "tracer.diff.compare", "tracer.diff.weights", "tracer.lens", "tracer.report",
        "tracer.report.cost", "tracer.cost.summary", "tracer.cost.moe",
        "tracer.engine.decode", "tracer.generate", "tracer.diff.generation"]


def test_core_layers_import_no_ui_or_torch():
    code = "import sys\n" + "".join(f"import {m}\n" for m in CORE) + (
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'typer', 'click', 'torch', 'transformers'))\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"core layers pulled in: {out}"


def test_the_command_line_does_not_import_torch():
    code = "import sys, tracer.cli.main; print(any(m.startswith(('torch', 'transformers')) for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
