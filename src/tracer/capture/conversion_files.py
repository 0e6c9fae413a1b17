"""llama.cpp's model-conversion file set: the last position's logits of one prompt, as float32 bytes.

`examples/model-conversion` (run-org-model.py) writes the reference side as `data/pytorch-<model>.bin` and
`llama-debug --save-logits` the converted side as `data/llamacpp-<model>.bin`, each with

    <side>-<model>.bin          float32 logits of the last position, raw little-endian  [vocab]
    <side>-<model>.txt          one `i: value` line per logit (%.6f)
    <side>-<model>-tokens.bin   int32 token ids, raw                                    [n_tokens]
    <side>-<model>-prompt.txt   `prompt: ...`, `n_tokens: N`, `token ids: a, b, ...`

and compare-logits.py / check-nmse.py read them. tracer writes the reference side (under the name those
scripts look for) without torch, and reads either side back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tracer.errors import TracerError

_NAME = re.compile(r"^(?P<side>pytorch|llamacpp)-(?P<model>.+?)(?P<suffix>-embeddings)?\.bin$")


@dataclass(frozen=True)
class LogitsFile:
    path: Path
    side: str  # pytorch | llamacpp
    model: str
    logits: np.ndarray  # float32 [vocab] (or the embedding)
    tokens: list[int]
    prompt: str | None


def is_logits_file(path: Path) -> bool:
    """A `<side>-<model>.bin` of the set: by its name and its `-tokens.bin` beside it (pytorch_model.bin, a
    pickle, has neither)."""
    m = _NAME.match(path.name)
    if not m or path.name.endswith("-tokens.bin"):
        return False
    return path.with_name(path.name[: -len(".bin")] + "-tokens.bin").is_file()


def read_logits_file(path: Path) -> LogitsFile:
    m = _NAME.match(path.name)
    if not m:
        raise TracerError(f"{path}: not a model-conversion logits file (llamacpp-<model>.bin or pytorch-<model>.bin)")
    base = path.with_name(path.name[: -len(".bin")])
    tokens_path = Path(str(base) + "-tokens.bin")
    for p, what in ((path, "logits"), (tokens_path, "token ids")):
        if not p.is_file():
            raise TracerError(f"{p}: no such file ({what} of the model-conversion set)")
        if p.stat().st_size % 4:
            raise TracerError(f"{p}: {p.stat().st_size} bytes is not a whole number of 4-byte values")
    logits = np.fromfile(path, dtype="<f4")
    tokens = [int(t) for t in np.fromfile(tokens_path, dtype="<i4")]
    if logits.size == 0 or not tokens:
        raise TracerError(f"{path if logits.size == 0 else tokens_path}: empty")
    prompt = None
    prompt_path = Path(str(base) + "-prompt.txt")
    if prompt_path.is_file():
        first = prompt_path.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
        prompt = first[len("prompt: "):] if first.startswith("prompt: ") else None
    return LogitsFile(path, m.group("side"), m.group("model"), logits, tokens, prompt)


def logits_file_set(folder: Path, model: str, logits: np.ndarray, tokens: list[int], prompt: str | None,
                    side: str = "pytorch") -> dict[Path, bytes]:
    """The four files of one side, as bytes per path (written together by the caller)."""
    logits = np.ascontiguousarray(logits, dtype="<f4").reshape(-1)
    ids = np.asarray(tokens, dtype="<i4")
    base = folder / f"{side}-{model}"
    text = "".join(f"{i}: {v:.6f}\n" for i, v in enumerate(logits.tolist()))
    prompt_text = (f"prompt: {prompt if prompt is not None else ''}\nn_tokens: {len(tokens)}\n"
                   f"token ids: {', '.join(str(int(t)) for t in tokens)}\n")
    return {Path(f"{base}.bin"): logits.tobytes(), Path(f"{base}.txt"): text.encode(),
            Path(f"{base}-tokens.bin"): ids.tobytes(), Path(f"{base}-prompt.txt"): prompt_text.encode("utf-8")}


def prompt_logits(trace) -> tuple[list[int], np.ndarray]:
    """(the real token ids, the last real position's logits [vocab]) of a one-prompt trace, as the files hold them."""
    if "logits" not in trace or not trace.step("logits").kept or "input.ids" not in trace:
        raise TracerError("no logits (or no input.ids) kept to compare", hint="tracer run --keep logits --save")
    ids, logits = trace["input.ids"], trace["logits"]
    if ids.shape[0] != 1:
        raise TracerError(f"a batch of {ids.shape[0]}: the model-conversion files hold one prompt's logits",
                          hint="run one prompt")
    mask = trace["input.mask"][0] if "input.mask" in trace and trace.step("input.mask").kept else np.ones_like(ids[0])
    last = int(np.flatnonzero(mask)[-1])
    return [int(i) for i, keep in zip(ids[0], mask) if keep], logits[0, last]
