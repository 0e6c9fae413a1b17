"""What `tracer diff` reads from a file: a trace (.safetensors), or a NumPy dump (.npy, .npz) of a port's tensors.

The kind is told by the file's first bytes, not its name (a file that is not safetensors is named for what
its first bytes say it is only after it failed to read as safetensors, whose first bytes are a length). A .npy file is one step named after the file
(`logits.npy` -> `logits`); each array of a .npz archive is a step named by its key. NumPy files are read
with `allow_pickle=False`: an object array, a pickle or a torch.save file (a zip holding `data.pkl`) is
refused by name, never unpickled. Anything else that is not safetensors is named for what it looks like.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from tracer.errors import TracerError

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
PICKLE_HINT = "tracer never unpickles; save the tensors with safetensors (safetensors.torch.save_file) or numpy.savez"


def load_side(path: Path):
    """A trace of the file at `path`, whatever of the supported kinds it is."""
    from tracer.checkpoint.safetensors_file import check_regular_file
    from tracer.trace import Trace

    check_regular_file(path, "trace file")
    head = _head(path)
    if head.startswith(NPY_MAGIC):
        return _foreign({path.stem: _npy(path)}, path)
    if head.startswith(ZIP_MAGICS):
        return _foreign(_npz(path), path)
    try:  # first as safetensors: its first 8 bytes are a length, which may look like any of the magics below
        return Trace.load(path)
    except TracerError:
        what = None if _looks_like_safetensors(head, path) else _other_kind(head)
        if what is None:
            raise
    raise TracerError(f"{path}: {what}, not a trace", hint=PICKLE_HINT if "pickle" in what else
                      "give a .safetensors trace (tracer run --save, tracer capture) or a .npy/.npz dump")


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(16)
    except OSError as exc:
        raise TracerError(f"{path}: {exc.strerror or exc}") from None


def _looks_like_safetensors(head: bytes, path: Path) -> bool:
    """A length that fits the file, then a JSON object: a (perhaps corrupt) safetensors file, whatever else its
    first bytes resemble."""
    import struct

    if len(head) < 9 or head[8:9] != b"{":
        return False
    try:
        return struct.unpack("<Q", head[:8])[0] <= path.stat().st_size - 8
    except OSError:
        return False


def _other_kind(head: bytes) -> str | None:
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return "a Python pickle (torch.save or pickle.dump)"
    if head.startswith(b"GGUF"):
        return "a GGUF model file"
    if head.lstrip()[:1] in (b"{", b"["):
        return "a JSON file"
    return None


def _npy(path: Path) -> np.ndarray:
    try:
        return _plain(np.load(path, allow_pickle=False), path, "array")
    except ValueError as exc:
        if "allow_pickle" in str(exc) or "Object arrays" in str(exc):
            raise TracerError(f"{path}: a NumPy object array (pickled Python objects)", hint=PICKLE_HINT) from None
        if "read all data" in str(exc) or "not fully written" in str(exc):
            raise TracerError(f"{path}: a truncated .npy file (it holds fewer bytes than its header describes)") from None
        raise TracerError(f"{path}: not a readable .npy file ({str(exc)[:120]})") from None
    except (EOFError, OSError) as exc:
        raise TracerError(f"{path}: a truncated .npy file ({str(exc)[:120]})") from None


def _npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with zipfile.ZipFile(path) as z:
            members = z.namelist()
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise TracerError(f"{path}: a corrupt zip archive ({str(exc)[:120]})") from None
    if any(m.endswith(".pkl") for m in members):
        raise TracerError(f"{path}: a torch.save file (a zip holding pickles), not a NumPy archive", hint=PICKLE_HINT)
    others = [m for m in members if not m.endswith(".npy")]
    if others:
        raise TracerError(f"{path}: a zip archive that is not a NumPy .npz (it holds {others[0][:60]!r})")
    arrays = {}
    try:
        with np.load(path, allow_pickle=False) as z:
            for key in z.files:
                arrays[key] = _plain(z[key], path, f"array {key!r}")
    except ValueError as exc:
        if "allow_pickle" in str(exc) or "Object arrays" in str(exc):
            raise TracerError(f"{path}: holds a NumPy object array (pickled Python objects)", hint=PICKLE_HINT) from None
        raise TracerError(f"{path}: not a readable .npz archive ({str(exc)[:120]})") from None
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise TracerError(f"{path}: a corrupt .npz archive ({str(exc)[:120]})") from None
    if not arrays:
        raise TracerError(f"{path}: an empty .npz archive")
    return arrays


def _plain(a, path: Path, what: str) -> np.ndarray:
    """Bool, integer and float arrays only (no complex, strings, datetimes, structured records)."""
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "biuf":
        raise TracerError(f"{path}: the {what} has dtype {getattr(a, 'dtype', type(a).__name__)}; "
                          "a step is bool, integer or float")
    return a.astype(a.dtype.newbyteorder("=")) if a.dtype.byteorder == ">" else a


def _foreign(arrays: dict[str, np.ndarray], path: Path):
    """A trace with no metadata, as Trace.load makes of a safetensors file written by another tool."""
    from tracer.trace import Trace
    from tracer.trace.stats import tensor_stats
    from tracer.trace.trace import Step

    steps = [Step(name, tuple(f"dim{i}" for i in range(a.ndim)), "", None, tuple(a.shape), str(a.dtype),
                  tensor_stats(a), a) for name, a in arrays.items()]
    return Trace(steps, {"format": "foreign", "source": path.name})
