"""Prompts of an exact token count for the shipped model, and a copy of it that allows 1024 positions.

The shipped model's config says max_position_embeddings 128; it is rotary, so tracer has no hard
limit beyond that advisory number (Model.max_positions reads it). The copy links the weights and
tokenizer and only raises the number, so 512-token screens can be tested on real weights.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "fixtures" / "default-model"
CORPUS = ROOT / "fixtures" / "corpus" / "seasons.txt"


def long_model(folder: Path, positions: int = 1024) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for f in DEFAULT.iterdir():
        if f.name != "config.json" and not (folder / f.name).exists():
            os.symlink(f, folder / f.name)
    cfg = json.loads((DEFAULT / "config.json").read_text(encoding="utf-8"))
    cfg["max_position_embeddings"] = positions
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return folder


@lru_cache(maxsize=None)
def prompt_of(n_tokens: int) -> str:
    """The longest start of the corpus that is exactly n_tokens tokens with BOS (searched by length)."""
    from tracer.checkpoint.tokenizer import Tokenizer

    tok = Tokenizer(DEFAULT / "tokenizer.json")
    text = CORPUS.read_text(encoding="utf-8")
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(tok.encode(text[:mid])) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    prompt = text[:lo]
    assert len(tok.encode(prompt)) == n_tokens, (n_tokens, len(tok.encode(prompt)))
    return prompt


def prompt_for(n_tokens: int) -> str:
    return "春天来" if n_tokens == 4 else prompt_of(n_tokens)
