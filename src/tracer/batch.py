"""Prompts or token ids -> a padded batch: ids, attention mask, positions, and per-token descriptions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracer.checkpoint.tokenizer import Tokenizer
from tracer.engine.forward import ForwardInputs
from tracer.masks.build import positions_from_mask
from tracer.errors import TracerError


@dataclass(frozen=True)
class Batch:
    inputs: ForwardInputs
    tokens: list[list[dict]]  # per row, per position: see Token.to_dict (pads included, marked)
    prompts: list[str | None]


def rows_from_text(texts: list[str], tok: Tokenizer | None, special_tokens: bool) -> tuple[list[list[dict]], list[str]]:
    if tok is None:
        raise TracerError("this checkpoint folder has no tokenizer.json, so text cannot be tokenized", hint="pass exact token ids with --ids")
    rows = []
    for text in texts:
        if not text or not text.strip():
            raise TracerError("the prompt is empty", hint='give some text, e.g. tracer run "春天来"')
        toks = tok.encode(text, special_tokens=special_tokens)
        if not toks:
            raise TracerError(f"the prompt {text!r} gives no tokens")
        rows.append([t.to_dict(pos, text) for pos, t in enumerate(toks)])
    return rows, texts


def rows_from_ids(id_rows: list[list[int]], tok: Tokenizer | None, vocab_size: int) -> list[list[dict]]:
    rows = []
    for r, ids in enumerate(id_rows):
        if not ids:
            raise TracerError(f"token id row {r} is empty")
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise TracerError(f"token id {i!r} is not an integer")
            if not 0 <= i < vocab_size:
                raise TracerError(f"token id {i} is outside the vocabulary [0, {vocab_size})")
        rows.append([_id_token(pos, int(i), tok) for pos, i in enumerate(ids)])
    return rows


def _id_token(pos: int, tid: int, tok: Tokenizer | None) -> dict:
    known = tok.describe_id(tid) if tok else {"piece": f"<{tid}>", "bytes": "", "special": False}
    return {"pos": pos, "id": tid, **known, "text": "", "start": 0, "end": 0, "pad": False}


def pad_rows(rows: list[list[dict]], pad_id: int, side: str) -> tuple[ForwardInputs, list[list[dict]]]:
    if side not in ("left", "right"):
        raise TracerError(f"--pad-side must be left or right, not {side!r}")
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    padded = []
    for b, row in enumerate(rows):
        n = len(row)
        start = width - n if side == "left" else 0
        ids[b, start : start + n] = [t["id"] for t in row]
        mask[b, start : start + n] = 1
        pad = {"id": pad_id, "piece": "<pad>", "bytes": "", "text": "", "start": 0, "end": 0, "special": True, "pad": True}
        full = [dict(pad) for _ in range(width)]
        for j, t in enumerate(row):
            full[start + j] = t
        padded.append([{**t, "pos": p} for p, t in enumerate(full)])
    return ForwardInputs(ids, mask, positions_from_mask(mask)), padded


def check_length(rows: list[list[dict]], limit: int | None) -> None:
    longest = max(len(r) for r in rows)
    if limit is not None and longest > limit:
        raise TracerError(f"the input has {longest} tokens but the model allows at most {limit} positions")
