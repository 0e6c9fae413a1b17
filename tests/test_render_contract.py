"""The render room returns renderables; the command line prints them (DESIGN.md, "The rooms")."""

import ast
import pathlib

RENDER = pathlib.Path(__file__).resolve().parents[1] / "src" / "tracer" / "render"


def test_no_render_function_prints():
    printing = []
    for path in sorted(RENDER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                if (isinstance(f, ast.Name) and f.id == "print") or (isinstance(f, ast.Attribute) and f.attr in ("print", "log", "rule")):
                    printing.append(f"{path.name}:{node.lineno}")
    assert not printing, "render/* prints instead of returning a renderable: " + ", ".join(printing)
