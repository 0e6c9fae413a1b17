"""Trace metadata of a capture: what each token id is, and the config's hash."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np


def describe_tokens(model_dir: Path, ids: np.ndarray, mask: np.ndarray) -> list[list[dict]] | None:
    """Per row, what each id is (piece and text through the folder's tokenizer.json); None without one.

    Character offsets are None: capture starts from ids, not text.
    """
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    special = {i for i, tok in tokenizer.get_added_tokens_decoder().items() if tok.special}
    rows = []
    for row_ids, row_mask in zip(ids.tolist(), mask.tolist()):
        rows.append(
            [
                {
                    "pos": pos,
                    "id": token_id,
                    "piece": tokenizer.id_to_token(token_id),
                    "text": tokenizer.decode([token_id], skip_special_tokens=False),
                    "start": None,
                    "end": None,
                    "special": token_id in special,
                    "pad": keep == 0,
                }
                for pos, (token_id, keep) in enumerate(zip(row_ids, row_mask))
            ]
        )
    return rows


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
