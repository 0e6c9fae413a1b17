"""Real llama.cpp for the live tests: find the build, convert fixture folders to GGUF, run the tools.

The tools come from `.ci/llamacpp.sh` (llama.cpp vendored in the llama-cpp-python 0.3.36 sdist, built once and
cached by version). Found through TRACER_LLAMACPP (the folder of the binaries, set by .ci/run) or the script's
default cache; tests skip, saying how to build it, when they are absent.

Conversion runs the sdist's own `convert_hf_to_gguf.py` with its own gguf-py, changed in one place: our fixture
tokenizers are not among the hashes `get_vocab_base_pre` knows ("BPE pre-tokenizer was not recognized"), so the
harness answers `gpt-2` for them. Why gpt-2: every fixture's tokenizer.json pre-tokenizes with
ByteLevel(use_regex=True), which is GPT-2's regex, and llama.cpp's `gpt-2` pre-tokenizer is that regex (its
missing trailing `|\\s+` only matches what llama.cpp keeps as an unmatched piece anyway). The default model also
isolates each CJK character first; no llama.cpp pre-tokenizer does that, but its merges were learned with the
characters apart, so no merge joins two of them and gpt-2 splits its words into the same tokens.
Other tiny-fixture fixes (ports.md, "Corrections"): a gpt2 config gets `n_ctx` (transformers 5 no longer saves it).
Converted files are cached per run (folder content, outtype, pre-tokenizer) under the temp directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

VERSION = "0.3.36"
REPO = Path(__file__).resolve().parents[1]
TOOLS = ("llama-eval-callback", "llama-debug", "llama-quantize", "llama-tokenize")
FIXTURE_PRE = "gpt-2"


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "tracer" / f"llama.cpp-{VERSION}"
    return Path(os.environ.get("TRACER_LLAMACPP_CACHE", default))


def bin_dir() -> Path | None:
    """The folder of llama.cpp's binaries, or None when it is not built."""
    env = os.environ.get("TRACER_LLAMACPP")
    folder = Path(env) if env else cache_dir() / "bin"
    return folder if (folder / "llama-tokenize").is_file() else None


def source_dir() -> Path | None:
    """The llama.cpp source tree (convert_hf_to_gguf.py, gguf-py), beside the binaries in the cache."""
    env = os.environ.get("TRACER_LLAMACPP_SRC")
    candidates = [Path(env)] if env else []
    if bin_dir() is not None:
        candidates.append(bin_dir().parent / "llama.cpp")
    candidates.append(cache_dir() / "llama.cpp")
    return next((c for c in candidates if (c / "convert_hf_to_gguf.py").is_file()), None)


_HOW = "build it with .ci/llamacpp.sh, or point TRACER_LLAMACPP at the folder of its binaries"


def require_binary(name: str) -> Path:
    folder = bin_dir()
    if folder is None or not (folder / name).is_file():
        pytest.skip(f"llama.cpp's {name} is not built ({_HOW})")
    return folder / name


def require_converter() -> Path:
    src = source_dir()
    if src is None:
        pytest.skip(f"llama.cpp's convert_hf_to_gguf.py is not unpacked ({_HOW})")
    for module in ("torch", "numpy", "safetensors", "sentencepiece", "transformers"):
        pytest.importorskip(module, reason=f"convert_hf_to_gguf.py needs {module}")
    return src / "convert_hf_to_gguf.py"


# --- converting fixtures -------------------------------------------------------------------------------------

_WRAPPER = """
import runpy, sys
src, pre = sys.argv[1], sys.argv[2]
sys.path[:0] = [src, src + '/gguf-py']
import conversion.base
conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = [src + '/convert_hf_to_gguf.py'] + sys.argv[3:]
runpy.run_path(src + '/convert_hf_to_gguf.py', run_name='__main__')
"""


def _prepared_copy(folder: Path, into: Path) -> Path:
    """The fixture folder as the converter can read it (tiny-fixture fixes only, weights untouched)."""
    shutil.copytree(folder, into, ignore=shutil.ignore_patterns("reference*.safetensors", "prompts.json"))
    config = json.loads((into / "config.json").read_text())
    if config.get("model_type") == "gpt2" and "n_ctx" not in config:
        config["n_ctx"] = config.get("n_positions", 1024)
        (into / "config.json").write_text(json.dumps(config, indent=2))
    return into


def _folder_key(folder: Path, *extra: str) -> str:
    h = hashlib.sha256("\0".join(extra).encode())
    for f in sorted(folder.iterdir()):
        if f.is_file() and not f.name.startswith("reference"):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def convert(folder: Path, outtype: str = "f32", pre: str = FIXTURE_PRE, timeout: float = 600) -> Path:
    """`convert_hf_to_gguf.py --outtype OUTTYPE` of a model folder (tokenizer pre-tokenizer answered `pre`)."""
    script = require_converter()
    folder = Path(folder).resolve()
    out_dir = Path(tempfile.gettempdir()) / "tracer-llamacpp-gguf" / _folder_key(folder, outtype, pre, VERSION)
    out = out_dir / f"{folder.name}-{outtype}.gguf"
    if out.is_file():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        model = _prepared_copy(folder, Path(tmp) / folder.name)
        part = Path(tmp) / out.name
        cmd = [sys.executable, "-c", _WRAPPER, str(script.parent), pre, str(model), "--outtype", outtype,
               "--outfile", str(part)]
        env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}  # the sdist's own gguf-py, first
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if proc.returncode != 0 or not part.is_file():
            tail = "\n".join((proc.stderr or proc.stdout).splitlines()[-15:])
            raise AssertionError(f"convert_hf_to_gguf.py failed on {folder.name}:\n{tail}")
        part.replace(out)
    return out


# --- running the tools ---------------------------------------------------------------------------------------

def run_tool(name: str, args: list[str], stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run one of llama.cpp's binaries; a non-zero exit fails the test with the end of its output."""
    binary = require_binary(name)
    proc = subprocess.run([str(binary), *args], input=stdin, capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.decode("utf-8", "replace").splitlines()[-15:])
        raise AssertionError(f"{name} {' '.join(args)} exited {proc.returncode}:\n{tail}")
    return proc


def llama_tokenize(gguf: Path, text: str, bos: bool = True) -> list[int]:
    """llama-tokenize's ids for `text` (read from stdin verbatim: no escape processing; special tokens parsed)."""
    args = ["-m", str(gguf), "--stdin", "--no-escape", "--ids", "--log-disable"] + ([] if bos else ["--no-bos"])
    out = run_tool("llama-tokenize", args, stdin=text.encode("utf-8")).stdout.decode()
    line = [ln for ln in out.splitlines() if ln.startswith("[")][-1]
    return json.loads(line)


def _whole(text: str) -> bool:
    """No tensor cut off in the middle (the unflushed logger can drop lines anywhere, not only at the end)."""
    from tracer.capture.llamacpp import parse_log

    return parse_log(text).cut_at is None


def dump_tensors(gguf: Path, prompt: str, tool: str = "llama-debug", extra: tuple[str, ...] = (),
                 attempts: int = 10) -> str:
    """The tensor dump (stdout) of one forward pass over `prompt`: llama-debug with --no-warmup, an f32 KV cache
    (the f16 default is ~1e-3 off), flash attention off (so kq_soft_max is printed), one thread.

    llama.cpp's logger is an unflushed queue at exit (common/log.cpp leaks it on purpose, llama.cpp#22142), so
    the end of the dump is lost in some runs, piped or not (seen here in 3 runs of 20 on a quiet machine, and
    in 4 runs out of 4 once on a busy one): the harness runs it up to `attempts` times (a run takes well under
    a second) until `result_output` and its sum are there and no tensor is cut, and returns the longest dump
    otherwise."""
    warmup = ["--no-warmup"] if tool == "llama-debug" else []  # llama-eval-callback has no such flag
    args = ["-m", str(gguf), "-p", prompt, *warmup, "-ctk", "f32", "-ctv", "f32", "-fa", "off", "-t", "1",
            "-c", "128", "--temp", "0", *extra]
    best = ""
    for _ in range(attempts):
        text = run_tool(tool, args, timeout=300).stdout.decode("utf-8", "replace")
        if re.search(r"result_output = .*?\n\s*sum = ", text, re.S) and _whole(text):
            return text
        best = max(best, text, key=len)
    return best
