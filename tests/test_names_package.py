"""tracer.names: one module per naming source, importing one way, with no effect on another's tables."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

NAMES = Path(__file__).resolve().parents[1] / "src" / "tracer" / "names"


def _names_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tracer.names."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.ImportFrom) and node.module == "tracer.names":
            found.update(a.name for a in node.names)
    return found


def test_the_modules_of_names_import_each_other_one_way():
    graph = {p.stem: _names_imports(p) for p in NAMES.glob("*.py") if p.stem != "__init__"}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "import circle: " + " -> ".join(path + (module,))
        if module not in done:
            for dep in graph.get(module, ()):
                visit(dep, path + (module,))
            done.add(module)

    for module in graph:
        visit(module, ())
    assert graph["hf_base"] == set() and "hf" not in graph["hf_decoders"]


def test_importing_a_source_changes_no_other_modules_tables():
    code = (
        "import json\n"
        "from tracer.names import hf_base\n"
        "before = json.dumps(hf_base.BASE_NAMES, sort_keys=True), sorted(map(str, hf_base.BASE_CONDITIONS))\n"
        "import tracer.names.hf_decoders, tracer.names.transformerlens, tracer.names.hf as hf\n"
        "after = json.dumps(hf_base.BASE_NAMES, sort_keys=True), sorted(map(str, hf_base.BASE_CONDITIONS))\n"
        "print(before == after, 'qwen3' in hf_base.BASE_NAMES, 'qwen3' in hf.HF_NAMES)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False", "True"]
