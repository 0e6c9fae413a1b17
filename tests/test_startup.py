"""Start-up: the command runs no subprocess (ctypes.util.find_library runs `ldconfig -p`), and load_model
tunes the allocator as the command does (so the Python API is as fast as `tracer run`)."""

import subprocess
import sys

import pytest

_HOOKED = """
import sys
seen = []
def hook(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork", "os.forkpty", "os.system", "os.spawn"):
        seen.append(event + " " + str(args)[:80])
sys.addaudithook(hook)
sys.argv = ["tracer", *{argv!r}]
from tracer.cli.main import main
try:
    main()
except SystemExit:
    pass
print("SPAWNED:", seen, file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["--version"], ["run", "--ids", "5,17", "--only", "top_k"]])
def test_the_command_starts_no_subprocess(argv):
    out = subprocess.run([sys.executable, "-c", _HOOKED.format(argv=argv)], capture_output=True, text=True, timeout=120)
    assert "SPAWNED: []" in out.stderr, out.stderr[-400:]


def test_the_allocator_is_found_without_find_library(monkeypatch):
    import ctypes.util

    from tracer.model import allocator

    def refuse(name):
        raise AssertionError("find_library runs ldconfig in a subprocess")

    monkeypatch.setattr(ctypes.util, "find_library", refuse)
    monkeypatch.setattr(allocator, "_applied", None)
    applied = allocator.reuse_freed_memory()
    assert applied is (sys.platform.startswith("linux") and _glibc())
    assert allocator.reuse_freed_memory() is applied  # once per process, the same answer after


def _glibc() -> bool:
    import platform

    return platform.libc_ver()[0] == "glibc"


def test_load_model_tunes_the_allocator(monkeypatch):
    import tracer
    from tracer.model import allocator

    calls = []
    monkeypatch.setattr(allocator, "reuse_freed_memory", lambda: calls.append(1) or True)
    tracer.load_model("fixtures/default-model")
    assert calls == [1]


def test_the_command_starts_without_loading_the_model_room():
    code = ("import sys; from tracer.cli.main import app; "
            "print(sorted(m for m in sys.modules if m.startswith(('tracer.model.model', 'tracer.engine', 'tracer.arch'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
