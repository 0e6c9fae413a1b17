"""Issue 11, the command line: usage errors in tracer's one-line form, id lists, argv, output paths, saving."""

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, model_dir
from hostile import assert_contract, cli, copy_model, run_model

LLAMA = model_dir("llama")


@pytest.mark.parametrize("args,fragment", [
    (["run", "--model", LLAMA, "--ids", "1", "--top-k", "0"], "error: --top-k: must be at least 1 (got '0')"),
    (["run", "--model", LLAMA, "--ids", "1", "--layer", "abc"], "error: --layer: not an integer (got 'abc')"),
    (["run", "--bogus"], "error: --bogus: no such option"),
    (["run", "--top-kk", "3"], "did you mean --top-k?"),
    (["run", "--ids"], "requires an argument"),
    (["diff", "a"], "error: missing B"),
    (["diff", "a", "b", "--atol", "x"], "error: --atol: not a number"),
    (["mask", "--buckets", "x"], "error: --buckets: not an integer"),
    (["capture", "x"], "error: missing --output"),
    (["steps", "extra"], "unexpected extra argument"),
    (["nosuch"], "no such command"),
])
def test_usage_errors_are_one_line_for_every_command(args, fragment):
    r = cli(*args)
    assert_contract(r, fragment)
    assert "╭" not in r.output and "Usage:" not in r.output
    assert "--help" in r.output  # the hint


@pytest.mark.parametrize("ids", ["²", "⑤", "٣", "1,²", "1e3", "0x10", "9" * 40])
def test_id_lists_accept_only_ascii_digits(ids):
    assert_contract(run_model_ids(ids), "--ids")


def run_model_ids(ids):
    return cli("run", "--model", LLAMA, "--ids", ids)


def test_only_empty_names_no_section():
    assert_contract(cli("run", "--model", LLAMA, "--ids", "1", "--only", ""), "--only names no section")


def test_invalid_utf8_prompt_in_process():
    assert_contract(cli("run", "--model", LLAMA, "ab\udcff"), "not valid UTF-8")


def test_invalid_utf8_prompt_from_a_real_argv(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    p = subprocess.run([sys.executable, "-m", "tracer.cli.main", "run", "--model", str(LLAMA).encode(), b"\xff\xfe"],
                       capture_output=True, env=env, timeout=60)
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == 2 and err.startswith("error: ") and "not valid UTF-8" in err and "Traceback" not in err


# ---------- output paths ----------


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("target,fragment", [
    (".", "not a file name"),
    ("sub", "is a folder, not a file"),
    ("afile/x.safetensors", "is a file, not a folder"),
    ("a" * 300 + ".safetensors", "file name too long"),
    ("sub/", "is a folder, not a file"),
])
def test_save_paths_checked_before_the_run(cwd, target, fragment):
    (cwd / "sub").mkdir()
    (cwd / "afile").write_text("x")
    assert_contract(run_model(LLAMA, "--save", target), fragment)
    assert sorted(p.name for p in cwd.iterdir()) == ["afile", "sub"]


def test_save_into_the_checkpoint_being_read(tmp_path):
    folder = copy_model(tmp_path)
    before = (folder / "model.safetensors").read_bytes()
    assert_contract(run_model(folder, "--save", folder / "model.safetensors"), "part of the checkpoint being read")
    assert (folder / "model.safetensors").read_bytes() == before


def test_save_and_export_html_are_all_or_none(tmp_path):
    out = tmp_path / "t.safetensors"
    r = run_model(LLAMA, "--save", out, "--export-html", "/proc/no/such/x.html")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert not out.exists() and not list(tmp_path.iterdir())


def test_save_and_export_html_to_the_same_file(tmp_path):
    out = tmp_path / "t.html"
    assert_contract(run_model(LLAMA, "--save", out, "--export-html", out), "name the same file", outputs=[out])


def test_both_outputs_written_when_all_is_well(tmp_path):
    (tmp_path / "sub").mkdir()
    out, page = tmp_path / "t.safetensors", tmp_path / "sub" / "p.html"
    r = run_model(LLAMA, "--save", out, "--export-html", page)
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 0 and "<html" in page.read_text()
    assert not [p for p in tmp_path.rglob("*tracer-tmp*")]


def test_disk_full_names_the_users_path_and_keeps_the_old_file(tmp_path, monkeypatch):
    from tracer import outputs

    out = tmp_path / "t.safetensors"
    out.write_bytes(b"previous")

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outputs.os, "fsync", full)
    r = run_model(LLAMA, "--save", out)
    assert_contract(r, f"cannot write {out}: no space left on the device")
    assert out.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["t.safetensors"]


def test_data_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    from tracer import outputs

    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(outputs.os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(outputs.os, "replace", lambda a, b: (calls.append("replace"), real_replace(a, b))[1])
    assert run_model(LLAMA, "--save", tmp_path / "t.safetensors").exit_code == 0
    assert calls.index("fsync") < calls.index("replace")


def test_a_stale_temp_file_of_a_dead_process_is_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".t.safetensors.tracer-tmp-{int(dead.stdout)}-abcd"
    stale.write_bytes(b"x" * 100)
    assert run_model(LLAMA, "--save", tmp_path / "t.safetensors").exit_code == 0
    assert not stale.exists()


def test_sigterm_while_writing_leaves_no_temp_file(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from tracer.outputs import write_output
        def slow(out):
            out.write(b"x" * 1000)
            out.flush()
            print("writing", flush=True)
            time.sleep(30)
        write_output(Path({str(tmp_path / 'out.bin')!r}), slow)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    assert p.stdout.readline().strip() == b"writing"
    assert [q for q in tmp_path.iterdir() if "tracer-tmp" in q.name]
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    assert p.returncode != 0
    assert list(tmp_path.iterdir()) == []


def test_mask_save_is_checked_before_the_work(tmp_path):
    (tmp_path / "d.npz").mkdir()
    r = cli("mask", "-c", "hf-2d", "--mask", "[[1,1]]", "--scores", "1,1,2,2", "--save", tmp_path / "d.npz")
    assert_contract(r, "is a folder, not a file")
