"""The schema of `__metadata__["tracer"]`: what a trace file must hold before any of it is trusted.

A file from another tool has no such entry and loads as a foreign trace; a file that has one must
describe its steps properly. Every problem is one TracerError naming the field and what was expected.
"""

from __future__ import annotations

from tracer.errors import TracerError

MAX_STEPS = 1_000_000
MAX_NDIM = 16
MAX_DIM = 1 << 48


def _fail(path, where: str, expected: str, value) -> TracerError:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return TracerError(f"{path}: trace metadata: {where} is {shown}, expected {expected}",
                       hint="the file was not written by tracer, or was edited; tracer diff also reads files without metadata")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_meta(path, meta, format_version: int) -> list[dict]:
    """Validate the parsed metadata; return its steps (each a checked dict)."""
    if not isinstance(meta, dict):
        raise _fail(path, "the metadata", "a JSON object", meta)
    version = meta.get("format_version", format_version)
    if not _is_int(version):
        raise _fail(path, "format_version", "an integer", version)
    if version > format_version:
        raise TracerError(f"{path}: trace format version {version} is newer than this tracer reads ({format_version})",
                          hint="update tracer")
    for key, kind, expected in (("model", dict, "an object"), ("tokens", list, "a list"), ("prompts", list, "a list"),
                                ("mask", dict, "an object"), ("keep", list, "a list"), ("reduced_to_stats", list, "a list"),
                                ("computed_in_blocks", list, "a list"), ("warnings", list, "a list")):
        if key in meta and meta[key] is not None and not isinstance(meta[key], kind):
            raise _fail(path, key, expected, meta[key])
    steps = meta.get("steps")
    if not isinstance(steps, list):
        raise _fail(path, "steps", "a list of step descriptions", steps)
    if len(steps) > MAX_STEPS:
        raise _fail(path, "steps", f"at most {MAX_STEPS} entries", f"{len(steps)} entries")
    seen: set[str] = set()
    for i, step in enumerate(steps):
        check_step(path, i, step)
        if step["name"] in seen:
            raise _fail(path, f"steps[{i}].name", "a name not used by an earlier step", step["name"])
        seen.add(step["name"])
    return steps


def check_step(path, i: int, step) -> None:
    where = f"steps[{i}]"
    if not isinstance(step, dict):
        raise _fail(path, where, "an object", step)
    name = step.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(path, f"{where}.name", "a non-empty string", name)
    where = f"step {name[:60]!r}"
    for key in ("axes", "op", "shape", "dtype", "stats"):
        if key not in step:
            raise TracerError(f"{path}: trace metadata: {where} has no {key!r}")
    axes, shape, stats = step["axes"], step["shape"], step["stats"]
    if not isinstance(axes, list) or not all(isinstance(a, str) for a in axes):
        raise _fail(path, f"{where} axes", "a list of strings", axes)
    if (not isinstance(shape, list) or len(shape) > MAX_NDIM
            or not all(_is_int(s) and 0 <= s <= MAX_DIM for s in shape)):
        raise _fail(path, f"{where} shape", f"a list of at most {MAX_NDIM} sizes >= 0", shape)
    if len(axes) != len(shape):
        raise _fail(path, f"{where} axes", f"{len(shape)} names (one per axis of its shape)", axes)
    if not isinstance(step["op"], str):
        raise _fail(path, f"{where} op", "a string", step["op"])
    if step.get("hf_module") is not None and not isinstance(step["hf_module"], str):
        raise _fail(path, f"{where} hf_module", "a string or null", step["hf_module"])
    if not isinstance(step["dtype"], str):
        raise _fail(path, f"{where} dtype", "a string", step["dtype"])
    if not isinstance(stats, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in stats.values()):
        raise _fail(path, f"{where} stats", "an object of numbers", stats)
