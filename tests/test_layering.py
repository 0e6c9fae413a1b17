"""One-way imports: the engine and the computing layers know nothing of rich, typer, torch or transformers."""

import subprocess
import sys

CORE = ["tracer.api", "tracer.model.model", "tracer.engine.forward", "tracer.trace", "tracer.masks.conventions",
        "tracer.masks.row", "tracer.diff.compare", "tracer.diff.weights", "tracer.report.lens", "tracer.report",
        "tracer.report.cost", "tracer.cost.summary", "tracer.cost.moe",
        "tracer.engine.decode", "tracer.model.generate", "tracer.diff.generation"]


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


# The rooms, lowest first (DESIGN.md "The rooms"). A room imports only rooms on lower lines, or itself;
# rooms on one line do not import each other. Top-level modules count as rooms of their own name.
FLOORS = [
    ["errors"],
    ["steps", "outputs", "numbers", "threads"],
    ["checkpoint"],
    ["arch"],
    ["trace"],
    ["names"],
    ["engine"],
    ["model"],
    ["masks", "cost"],
    ["diff"],
    ["capture", "dump"],
    ["report"],
    ["api"],  # the Python entry points: load_model and Model (model), diff (diff), cost (cost)
    ["render", "html"],
    ["cli"],
]


def _room_of(path) -> str:
    import pathlib

    rel = pathlib.Path(path).relative_to(_SRC)
    return rel.parts[0].removesuffix(".py")


def _is_room(name: str) -> bool:
    """`from tracer import api` names a room; `from tracer import __version__` a name of the package itself."""
    return (_SRC / name).is_dir() or (_SRC / f"{name}.py").is_file()


def _imports(path) -> set[str]:
    import ast

    tree = ast.parse(open(path, encoding="utf-8").read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods = [node.module] + ([f"{node.module}.{a.name}" for a in node.names if _is_room(a.name)]
                                    if node.module == "tracer" else [])
        elif isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        else:
            continue
        for m in mods:
            parts = m.split(".")
            if parts[0] == "tracer" and len(parts) > 1 and parts[1] != "__version__":
                found.add(parts[1])
    return found


import pathlib as _pathlib  # noqa: E402

_SRC = _pathlib.Path(__file__).resolve().parents[1] / "src" / "tracer"


# The upward edges allowed, each a facade imported lazily inside one function: Jupyter's display hook
# Trace._repr_html_ and tracer.report.html(trace) draw the HTML report, whose builder sits above them.
# (file relative to src/tracer, room it imports)
ALLOWED_UPWARD = {
    ("trace/trace.py", "report"),  # Trace._repr_html_ -> tracer.report.html
    ("report/__init__.py", "html"),  # tracer.report.html -> tracer.html.run_page
}


def test_rooms_import_only_lower_floors():
    floor = {room: i for i, line in enumerate(FLOORS) for room in line}
    wrong = []
    for path in sorted(_SRC.rglob("*.py")):
        room = _room_of(path)
        if room in ("__init__", "__main__", "_data"):
            continue
        assert room in floor, f"{path}: room {room!r} is on no floor of FLOORS (add it there and to DESIGN.md)"
        for target in _imports(path):
            if target == room or (path.relative_to(_SRC).as_posix(), target) in ALLOWED_UPWARD:
                continue
            assert target in floor, f"{path} imports tracer.{target}, which is on no floor"
            if floor[target] >= floor[room]:
                wrong.append(f"{path.relative_to(_SRC)} ({room}, floor {floor[room]}) imports tracer.{target} "
                             f"(floor {floor[target]})")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_the_floor_check_sees_an_upward_import(tmp_path):
    bad = tmp_path / "mod.py"
    bad.write_text("def f():\n    from tracer.cli.main import main\n    import tracer.render.theme\n")
    assert _imports(bad) == {"cli", "render"}


def test_the_allowed_upward_edges_are_lazy_imports_inside_functions():
    import ast

    for rel, target in ALLOWED_UPWARD:
        tree = ast.parse((_SRC / rel).read_text(encoding="utf-8"))
        top = set()
        for node in tree.body:  # module level only
            if isinstance(node, ast.ImportFrom) and node.module:
                top.add(node.module.split(".")[1] if node.module.startswith("tracer.") else "")
            elif isinstance(node, ast.Import):
                top.update(a.name.split(".")[1] for a in node.names if a.name.startswith("tracer."))
        assert target not in top, f"{rel} imports tracer.{target} at module level; only a lazy import is allowed"
        assert target in _imports(_SRC / rel), f"{rel} no longer imports tracer.{target}: drop it from ALLOWED_UPWARD"
