"""Writing output files safely: checked up front, staged in a temp file, fsynced, renamed all-or-none.

- `check_output(path, what)` before the work: not a directory, a parent folder that exists (a missing
  folder is refused, never created), a name the file system accepts, not a file the run is reading.
- `write_outputs({path: writer, ...})` stages every file as `.NAME.tracer-tmp-PID-XXXX` next to it,
  fsyncs it, then renames them all; if a rename fails the ones already done are rolled back.
- Temp files are removed on every exit path Python sees (exceptions, SIGTERM, SIGHUP, SIGINT, exit);
  a `kill -9` can still orphan one, so each write first removes stale temp files of dead processes.
- A failure names the path the user gave, never the temp file.
"""

from __future__ import annotations

import atexit
import errno
import os
import re
import signal
import tempfile
import threading
from pathlib import Path
from typing import Callable, Iterable, Mapping, BinaryIO

from tracer.errors import TracerError

TMP_TAG = ".tracer-tmp-"
_live: set[Path] = set()  # temp files of this process, removed at exit
Writer = Callable[[BinaryIO], None]


def name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def check_output(path: Path, what: str, reading: Iterable[Path] = ()) -> None:
    """Refuse an output path that cannot work, before any work is done."""
    text = str(path)
    shown = text if len(text) <= 80 else text[:60] + "..." + text[-12:]
    if not text or path.name in ("", ".", "..") or text.endswith(os.sep):
        raise TracerError(f"{what} {shown!r}: not a file name")
    try:
        anc = path.parent
        limit = name_max(anc if anc.is_dir() else Path("."))
        too_long = [p for p in path.parts if len(p.encode("utf-8", "surrogateescape")) > limit]
        if too_long or len(path.name.encode("utf-8", "surrogateescape")) + len(TMP_TAG) + 20 > limit:
            raise TracerError(f"{what} {shown}: file name too long", hint=f"the file system allows {limit} bytes per name")
        if path.is_dir():
            raise TracerError(f"{what} {shown}: is a folder, not a file", hint="give a file name, e.g. DIR/trace.safetensors")
        if path.exists() and not path.is_file():
            raise TracerError(f"{what} {shown}: not a regular file")
        if not anc.is_dir():
            if anc.exists():
                raise TracerError(f"{what} {shown}: {anc} is a file, not a folder")
            raise TracerError(f"{what} {shown}: the folder {anc} does not exist",
                              hint=f"create it first (mkdir -p {anc}); tracer does not make folders")
        if not os.access(anc, os.W_OK | os.X_OK):
            raise TracerError(f"{what} {shown}: cannot write in {anc} (permission denied or read-only)")
        if path.exists() and not os.access(path, os.W_OK) and not os.access(path.parent, os.W_OK):
            raise TracerError(f"{what} {shown}: permission denied")
    except OSError as exc:
        raise TracerError(f"{what} {shown}: {exc.strerror or exc}") from None
    target = _real(path)
    for r in reading:
        if _real(Path(r)) == target:
            raise TracerError(f"{what} {shown}: that file is an input of this command (part of the checkpoint being "
                              "read, or a file it reads); tracer will not overwrite it",
                              hint="write the output somewhere else")


def check_distinct(paths: Mapping[str, Path | None]) -> None:
    seen: dict[Path, str] = {}
    for what, p in paths.items():
        if p is None:
            continue
        key = _real(p)
        if key in seen:
            raise TracerError(f"{seen[key]} and {what} name the same file {p}")
        seen[key] = what


def _real(p: Path) -> Path:
    try:
        return p.resolve()
    except (OSError, RuntimeError):
        return p.absolute()


# ---------- temp files ----------


def remove_stale(folder: Path, name: str) -> None:
    """Delete temp files for `name` left by tracer processes that no longer run (e.g. after kill -9)."""
    pattern = re.compile(re.escape(f".{name}{TMP_TAG}") + r"(\d+)-")
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for p in entries:
        m = pattern.match(p.name)
        if m and not _alive(int(m.group(1))):
            try:
                p.unlink()
            except OSError:
                pass


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def _cleanup_live() -> None:
    for p in list(_live):
        try:
            p.unlink()
        except OSError:
            pass
        _live.discard(p)


atexit.register(_cleanup_live)


class _Signals:
    """While files are staged, SIGTERM/SIGHUP become SystemExit so the cleanup runs."""

    def __enter__(self):
        self.saved = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
                if sig is not None:
                    try:
                        self.saved[sig] = signal.signal(sig, _raise_exit)
                    except (ValueError, OSError):
                        pass
        return self

    def __exit__(self, *exc):
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
        return False


def _raise_exit(signum, _frame):
    raise SystemExit(128 + signum)


def _stage(path: Path, writer: Writer) -> Path:
    folder = path.parent  # checked to exist by check_output; never created here
    remove_stale(folder, path.name)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}{TMP_TAG}{os.getpid()}-", dir=folder)
    tmp = Path(tmp_name)
    _live.add(tmp)
    with os.fdopen(fd, "wb") as out:
        writer(out)
        out.flush()
        os.fsync(out.fileno())
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; an output is an ordinary file
    return tmp


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_outputs(files: Mapping[Path, Writer]) -> None:
    """Write every file or none: stage all, then rename all (rolling back on a failed rename)."""
    staged: dict[Path, Path] = {}
    backups: dict[Path, tuple[bool, Path | None]] = {}
    current = next(iter(files), Path("."))
    with _Signals():
        try:
            for path, writer in files.items():
                current = path
                staged[path] = _stage(path, writer)
            for path, tmp in staged.items():
                current = path
                backups[path] = _backup(path)
                os.replace(tmp, path)
                _live.discard(tmp)
            for path in staged:
                _fsync_dir(path.parent)
        except BaseException as exc:
            _roll_back(backups)
            for tmp in staged.values():
                _unlink(tmp)
            _cleanup_live()
            if isinstance(exc, OSError):
                raise TracerError(f"cannot write {_short(current)}: {_reason(exc)}", hint="the previous file, if any, is untouched") from None
            raise
        finally:
            for _existed, b in backups.values():
                if b is not None:
                    _unlink(b)


def write_output(path: Path, writer: Writer) -> None:
    write_outputs({Path(path): writer})


def _backup(path: Path) -> tuple[bool, Path | None]:
    """(the file existed, a hard link to it) so a later failed rename can put it back."""
    if not path.exists():
        return False, None
    b = path.with_name(f".{path.name}{TMP_TAG}{os.getpid()}-bak")
    _unlink(b)
    try:
        os.link(path, b)
    except OSError:
        return True, None
    _live.add(b)
    return True, b


def _roll_back(backups: dict[Path, tuple[bool, Path | None]]) -> None:
    for path, (existed, b) in backups.items():
        try:
            if b is not None:
                os.replace(b, path)
                _live.discard(b)
            elif not existed:
                path.unlink(missing_ok=True)
        except OSError:
            pass


def _unlink(p: Path) -> None:
    try:
        p.unlink(missing_ok=True)
    except OSError:
        pass
    _live.discard(p)


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 80 else text[:60] + "..." + text[-12:]


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return exc.strerror or exc.__class__.__name__
