"""JSON from untrusted files: a depth limit, no NaN/Infinity unless asked, one clear error for anything wrong.

Used for config.json, safetensors headers, shard indexes, trace metadata and `--names` maps, and (through
`load_json_file`) for every other JSON file of a checkpoint: tokenizer_config.json, generation_config.json,
sentence-transformers' modules.json and its Pooling config.
"""

from __future__ import annotations

import json
from pathlib import Path

from tracer.errors import TracerError

MAX_DEPTH = 64  # real configs and headers nest 3 or 4 deep


def _no_constants(word: str):
    raise ValueError(f"{word} is not JSON")


def load_json(raw: bytes | str, what: str, *, max_depth: int = MAX_DEPTH, constants: bool = False):
    """Parsed JSON, or TracerError naming `what` (a path or a description) and the problem."""
    try:
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8")
        value = json.loads(raw) if constants else json.loads(raw, parse_constant=_no_constants)
    except UnicodeDecodeError:
        raise TracerError(f"{what}: not valid JSON (not UTF-8 text)") from None
    except RecursionError:
        raise TracerError(f"{what}: not valid JSON (nested deeper than {max_depth} levels)") from None
    except ValueError as exc:  # JSONDecodeError, over-long integers, NaN/Infinity
        raise TracerError(f"{what}: not valid JSON ({_short(str(exc))})") from None
    if depth(value) > max_depth:
        raise TracerError(f"{what}: not valid JSON (nested deeper than {max_depth} levels)")
    return value


MAX_FILE_BYTES = 16 * 1024 * 1024  # a checkpoint's side files are a few KB


def load_json_file(path: Path, *, max_bytes: int = MAX_FILE_BYTES, constants: bool = False):
    """A JSON file of a checkpoint, read through load_json: a regular file of at most max_bytes, else TracerError."""
    path = Path(path)
    try:
        if not path.is_file():
            raise TracerError(f"{path}: not a regular file" if path.exists() else f"{path}: no such file")
        size = path.stat().st_size
        if size > max_bytes:
            raise TracerError(f"{path}: {size} bytes is too large for this JSON file")
        raw = path.read_bytes()
    except OSError as exc:
        raise TracerError(f"{path}: {exc.strerror or exc}") from None
    return load_json(raw, str(path), constants=constants)


def depth(value) -> int:
    """Nesting depth of parsed JSON, computed without recursion (a scalar is 0, [] is 1)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
            deepest = max(deepest, d + 1)
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
            deepest = max(deepest, d + 1)
    return deepest


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
