"""sentence-transformers' `max_seq_length`: it truncates a sentence encoder's input there, tracer does not.

A sentence-transformers folder says in `sentence_bert_config.json` how many tokens (specials included) the
encoder reads: all-MiniLM-L6-v2 reads 256 although its position table has 512 rows. tracer runs the whole
input as given, so past that length its pooled vector is not the one sentence-transformers returns; the run
records a warning (card, --json, saved trace) that says so and how to get the same input.
"""

from __future__ import annotations

import json
from pathlib import Path

CONFIG = "sentence_bert_config.json"
CODE = "past-max-seq-length"


def max_seq_length(folder: Path) -> int | None:
    """The folder's sentence-transformers max_seq_length, or None (no such file, or no usable value)."""
    path = Path(folder) / CONFIG
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("max_seq_length")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def seq_length_warning(folder: Path, row_lengths: list[int]) -> dict | None:
    """The warning to record when a row is longer than max_seq_length ({code, level, message, data})."""
    limit = max_seq_length(folder)
    if limit is None or not row_lengths or max(row_lengths) <= limit:
        return None
    longest = max(row_lengths)
    rows = [i for i, n in enumerate(row_lengths) if n > limit]
    message = (f"the input is {longest} tokens, past this model's max_seq_length {limit} ({CONFIG}): "
               f"sentence-transformers reads only its first {limit} tokens (the end token kept), tracer all "
               f"{longest}, so the pooled vector differs from sentence-transformers' here; give a shorter input "
               f"to compare them")
    return {"code": CODE, "level": "warning", "message": message,
            "data": {"limit": limit, "source": CONFIG, "longest": longest, "rows": rows}}


def note_seq_length(trace, folder: Path) -> None:
    """Record the warning in the run's meta (the card, --json and the saved trace carry it)."""
    rows = trace.meta.get("tokens") or []
    lengths = [sum(1 for t in row if not t.get("pad")) for row in rows]
    found = seq_length_warning(folder, lengths)
    if found is not None:
        trace.meta["warnings"] = [*trace.meta.get("warnings", []), found]
