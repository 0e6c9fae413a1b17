"""Helpers for the hostile-input tests: the contract, checkpoint copies and hand-made files."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from typer.testing import CliRunner

from conftest import model_dir
from tracer.cli.main import app

runner = CliRunner()


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_contract(result, fragment: str | None = None, outputs=()):
    """Exit 2, one `error:` line (plus at most a hint), no traceback, no output file."""
    text = result.output
    assert result.exit_code == 2, text
    assert "Traceback" not in text and "internal error" not in text, text
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1, text
    assert all(ln.startswith(("error: ", "hint: ", "warning: ")) for ln in lines), text
    if fragment is not None:
        assert fragment in text, text
    for p in outputs:
        assert not Path(p).exists(), f"{p} was written"
        assert not [q for q in Path(p).parent.glob(f".{Path(p).name}.tracer-tmp-*")], "temp file left"


def copy_model(tmp_path, name: str = "llama") -> Path:
    dst = tmp_path / name
    shutil.copytree(model_dir(name), dst)
    return dst


def edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is DELETE:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (folder / "config.json").write_text(json.dumps(cfg))


def raw_config_value(folder: Path, key: str, literal: str) -> None:
    """Set a config field to a JSON literal written verbatim (NaN, 1e400, a 5,000-digit integer)."""
    cfg = json.loads((folder / "config.json").read_text())
    cfg[key] = "__RAW__"
    (folder / "config.json").write_text(json.dumps(cfg).replace('"__RAW__"', literal))


DELETE = object()


def write_safetensors_raw(path: Path, header: bytes | dict, data: bytes = b"") -> Path:
    """A safetensors file with exactly this header (dict or raw bytes) and data."""
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return path


def run_model(folder, *extra):
    return cli("run", "--model", folder, "--ids", "1,2", "--only", "top_k", *extra)
