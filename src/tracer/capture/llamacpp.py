"""Read the tensor dump of llama.cpp's `llama-eval-callback` / `llama-debug` (common/debug.cpp) into typed records.

One record per graph node the callback printed:

    common_debug_cb_eval:              attn_norm-0 = (f32)        MUL(norm-0{32, 7, 1, 1}, blk.0.attn_norm.weight{32, 1, 1, 1}}) = {32, 7, 1, 1}
                                     [
                                      [
                                       [      0.1234,      -0.5678, ...,       0.0012  ],
                                       ...,
                                      ],
                                     ]
                                     sum = 1.234567

ggml lists the extents `ne` innermost first; here they are reversed into NumPy order (ne3, ne2, ne1, ne0). Only
the first and last 3 entries of an axis longer than 6 are printed (`%12.4f`), plus the sum of every value: a
record keeps exactly what is there, with the NumPy index each printed value sits at. Quantized tensors print their
header only. A log cut off mid-tensor (llama-eval-callback's logger is not flushed at exit) keeps the complete
records and says where it ended.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracer.errors import TracerError

EDGE = 3  # common_debug_print_tensor's n: values printed at each end of an axis
DIGITS = 4  # %12.4f
_HEADER = re.compile(r"common_debug_cb_eval:\s+(?P<name>.+?) = \((?P<type>\w+)\)\s+(?P<op>\S+)\((?P<srcs>.*)\) = "
                     r"\{(?P<ne>\d+(?:, \d+)*)\}\s*$")
_SOURCE = re.compile(r"(?:^|, )(?P<name>[^{}]*?)\{(?P<ne>\d+(?:, \d+)*)\}")
_SUM = re.compile(r"^\s*sum = (?P<v>\S+)\s*$")
_NUMBER = re.compile(r"^-?(?:\d+\.\d+|nan|inf)$", re.I)


@dataclass(frozen=True)
class GgmlTensor:
    name: str  # graph name, e.g. "attn_norm-0", "Qcur-0", "result_output"
    dtype: str  # "f32", "f16", "q8_0", ...
    op: str  # "MUL", "MUL_MAT", "ROPE", "RESHAPE", "GET_ROWS", ...
    sources: tuple[tuple[str, tuple[int, ...]], ...]  # (name, NumPy shape) of src0 and src1
    shape: tuple[int, ...]  # NumPy order: ggml ne reversed (4 axes)
    index: tuple[tuple[int, ...], ...]  # per axis, the indices whose values were printed
    values: np.ndarray | None  # float64 [len(index[0]), ..., len(index[3])]; None when not printed (quantized)
    sum: float | None  # sum of every value (float32 accumulation)
    line: int  # 1-based line of the header

    @property
    def layer(self) -> int | None:
        m = re.search(r"-(\d+)$", self.name)
        return int(m.group(1)) if m else None

    @property
    def base(self) -> str:
        """The name without its layer suffix: "attn_norm-3" -> "attn_norm"."""
        return re.sub(r"-\d+$", "", self.name)

    @property
    def complete(self) -> bool:
        """Every value was printed (no axis longer than 2 * EDGE)."""
        return all(len(ix) == n for ix, n in zip(self.index, self.shape))


@dataclass
class GgmlLog:
    tensors: list[GgmlTensor] = field(default_factory=list)
    cut_at: int | None = None  # line where the log ends mid-tensor, None when it ends cleanly
    source: str = ""
    token_ids: list[int] = field(default_factory=list)  # the prompt's ids as the tool printed them ([] if not)

    def named(self, name: str) -> list[GgmlTensor]:
        return [t for t in self.tensors if t.name == name]


def printed_indices(n: int, edge: int = EDGE) -> tuple[int, ...]:
    """Which entries of an axis of length n common_debug_print_tensor prints."""
    return tuple(range(n)) if n <= 2 * edge else tuple(range(edge)) + tuple(range(n - edge, n))


def is_llamacpp_log(text: str) -> bool:
    return "common_debug_cb_eval:" in text[:1 << 20]


def read_log(path: Path) -> GgmlLog:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise TracerError(f"{path}: cannot read llama.cpp log ({exc.strerror})") from None
    log = parse_log(text, str(path))
    if not log.tensors:
        raise TracerError(f"{path}: no tensors in this llama.cpp log",
                          hint="run llama-eval-callback or llama-debug and save what it prints")
    return log


def parse_log(text: str, source: str = "log") -> GgmlLog:
    lines = text.splitlines()
    log = GgmlLog(source=source, token_ids=token_ids(text))
    i = 0
    while i < len(lines):
        m = _HEADER.search(lines[i])
        if not m:
            i += 1
            continue
        start = i
        ne = tuple(int(x) for x in m.group("ne").split(", "))
        shape = tuple(reversed(ne))
        index = tuple(printed_indices(n) for n in shape)
        sources = tuple((s.group("name").strip(), tuple(reversed([int(x) for x in s.group("ne").split(", ")])))
                        for s in _SOURCE.finditer(m.group("srcs")))
        rows, sums, i = _read_body(lines, i + 1, shape[0])
        n_rows = len(index[0]) * len(index[1]) * len(index[2])
        if rows is None:  # header only: a quantized tensor (or a filtered-out body)
            values, total = None, None
        elif len(rows) != n_rows or any(len(r) != len(index[3]) for r in rows) or len(sums) < shape[0]:
            log.cut_at = start + 1
            break
        else:
            values = np.array(rows, dtype=np.float64).reshape(tuple(len(ix) for ix in index))
            total = sums[0]
        log.tensors.append(GgmlTensor(m.group("name").strip(), m.group("type"), m.group("op"), sources, shape,
                                      index, values, total, start + 1))
    return log


def token_ids(text: str) -> list[int]:
    """The prompt's ids: llama-debug prints `Token ids (N):` then `piece(id) ...`, llama-eval-callback
    `number of input tokens = N` then one id a line."""
    m = re.search(r"Token ids \((\d+)\):\n", text)
    if m:
        ids = [int(x) for x in re.findall(r"\((\d+)\) ", text[m.end():])[: int(m.group(1))]]
        return ids if len(ids) == int(m.group(1)) else []
    m = re.search(r"number of input tokens = (\d+)\n", text)
    if m:
        ids = []
        for line in text[m.end():].splitlines()[: int(m.group(1))]:
            found = re.search(r"^\S*?\s*(\d+)\s*$", line)
            if not found:
                return []
            ids.append(int(found.group(1)))
        return ids
    return []


def _read_body(lines: list[str], i: int, blocks: int):
    """The value rows and sums after a header: (rows or None, sums, next line index)."""
    rows: list[list[float]] = []
    sums: list[float] = []
    seen_bracket = False
    while i < len(lines):
        line = lines[i]
        if _HEADER.search(line):
            break
        stripped = line.strip()
        s = _SUM.match(line)
        if s:
            sums.append(_float(s.group("v")))
            i += 1
            if len(sums) == blocks:
                break
            continue
        if stripped.startswith("[") and stripped.endswith("],") and len(stripped) > 3:
            seen_bracket = True
            row = [_float(tok) for tok in (t.strip() for t in stripped[1:-2].split(",")) if _NUMBER.match(tok)]
            rows.append(row)
        elif stripped in ("[", "],", "]", "...,"):
            seen_bracket = True
        elif seen_bracket or stripped:
            if seen_bracket:  # something else inside a tensor body: the dump was interrupted
                break
        i += 1
    if not seen_bracket and not sums:
        return None, sums, i
    return rows, sums, i


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan
