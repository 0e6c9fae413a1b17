"""Prompts or token ids -> a padded batch: ids, attention mask, positions, and per-token descriptions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracer.checkpoint.tokenizer import Tokenizer
from tracer.engine.forward import ForwardInputs
from tracer.masks.build import positions_by_rule
from tracer.errors import TracerError


@dataclass(frozen=True)
class Batch:
    inputs: ForwardInputs
    tokens: list[list[dict]]  # per row, per position: see Token.to_dict (pads included, marked)
    prompts: list[str | None]
    decoder_tokens: list[list[dict]] | None = None  # encoder-decoder: the decoder's input tokens
    position_rule: str = "mask"  # how the (encoder's) position ids were counted: "mask" or "index"
    warnings: tuple[dict, ...] = ()  # inputs past max_position_embeddings with allow_long (tracer.long_inputs)


def rows_from_text(texts: list[str], tok: Tokenizer | None, special_tokens: bool,
                   pair: str | None = None) -> tuple[list[list[dict]], list[str]]:
    """Tokenize each prompt (with `pair` as every row's second text, marked by the tokenizer's template)."""
    if tok is None:
        raise TracerError("this checkpoint folder has no tokenizer.json, so text cannot be tokenized", hint="pass exact token ids with --ids")
    rows = []
    for text in texts:
        if not text or not text.strip():
            raise TracerError("the prompt is empty", hint='give some text, e.g. tracer run "春天来"')
        if pair is not None and not pair.strip():
            raise TracerError("the text pair is empty")
        toks = tok.encode(text, special_tokens=special_tokens, pair=pair)
        if not toks:
            raise TracerError(f"the prompt {text!r} gives no tokens")
        rows.append([t.to_dict(pos, text if t.sequence == 0 else pair) for pos, t in enumerate(toks)])
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


def pad_rows(rows: list[list[dict]], pad_id: int, side: str, rule: str = "mask") -> tuple[ForwardInputs, list[list[dict]]]:
    """Pad rows to one width; positions follow the family's rule (see masks.build.positions_by_rule)."""
    if side not in ("left", "right"):
        raise TracerError(f"--pad-side must be left or right, not {side!r}")
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    types = np.zeros((len(rows), width), dtype=np.int64)
    padded = []
    for b, row in enumerate(rows):
        n = len(row)
        start = width - n if side == "left" else 0
        ids[b, start : start + n] = [t["id"] for t in row]
        mask[b, start : start + n] = 1
        types[b, start : start + n] = [t.get("type", 0) for t in row]
        pad = {"id": pad_id, "piece": "<pad>", "bytes": "", "text": "", "start": 0, "end": 0, "special": True, "pad": True}
        full = [dict(pad) for _ in range(width)]
        for j, t in enumerate(row):
            full[start + j] = t
        padded.append([{**t, "pos": p} for p, t in enumerate(full)])
    return ForwardInputs(ids, mask, positions_by_rule(mask, rule), types), padded


def with_token_types(rows: list[list[dict]], types: list[list[int]], n_types: int) -> list[list[dict]]:
    """Rows with segment ids given by the user (`--token-types 0,0,1,1`), one per token, checked."""
    if n_types == 0:
        raise TracerError("this model has no token types (segment embeddings); --token-types applies to the BERT family")
    if len(types) != len(rows):
        raise TracerError(f"--token-types gives {len(types)} row(s) for {len(rows)} input row(s)")
    out = []
    for r, (row, t) in enumerate(zip(rows, types)):
        if len(t) != len(row):
            raise TracerError(f"--token-types row {r} has {len(t)} ids for {len(row)} tokens", hint="one type per token, specials included")
        bad = [x for x in t if not 0 <= x < n_types]
        if bad:
            raise TracerError(f"token type {bad[0]} is outside [0, {n_types}) for this model")
        out.append([{**tok, "type": int(x)} for tok, x in zip(row, t)])
    return out
