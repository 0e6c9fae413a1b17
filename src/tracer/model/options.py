"""How a model's inputs are built from prompts or ids: one frozen dataclass, as masks/options.MaskOptions.

    model.run("text", pad_side="left")                       # keywords, or
    model.run("text", options=InputOptions(pad_side="left"))  # the same, typed

Errors name the parameters (`pad_side`, `positions`, ...); the CLI says which flag set them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Sequence

import numpy as np

from tracer.errors import TracerError

PAD_SIDES = ("left", "right")
POSITION_RULES = ("auto", "mask", "index")  # auto: the family's rule (transformers'); mask: cumsum(mask) - 1


@dataclass(frozen=True)
class InputOptions:
    """pad_side: where a batch is padded. special_tokens: the tokenizer's post-processor (BOS/EOS/CLS).
    pair: a second text for every row (BERT family: the tokenizer's pair template, token type 1).
    token_types: segment ids per row, one per token. decoder_text / decoder_ids: an encoder-decoder's decoder
    input, one for every row (a str / a list of ids) or one per row (a list of str / a list of id lists;
    ragged rows are padded as the encoder's are); default: the decoder start token. positions: "auto", "mask"
    or "index". allow_long: rotary and relative positions may run past max_position_embeddings (a warning)."""

    pad_side: str = "right"
    special_tokens: bool = True
    pair: str | None = None
    token_types: tuple[tuple[int, ...], ...] | None = None
    decoder_text: str | tuple[str, ...] | None = None
    decoder_ids: tuple[int, ...] | tuple[tuple[int, ...], ...] | None = None
    positions: str = "auto"
    allow_long: bool = False

    def __post_init__(self):
        if self.pad_side not in PAD_SIDES:
            raise TracerError(f"`pad_side` must be left or right, not {self.pad_side!r}")
        if self.positions not in POSITION_RULES:
            raise TracerError(f"`positions` must be 'auto', 'mask' or 'index', not {self.positions!r}")
        if self.decoder_text is not None and self.decoder_ids is not None:
            raise TracerError("give `decoder_text` or `decoder_ids`, not both")
        if self.token_types is not None:
            object.__setattr__(self, "token_types", tuple(_int_row(r, "token_types") for r in _rows(self.token_types)))
        if self.decoder_ids is not None:
            ids = self.decoder_ids
            one = len(ids) > 0 and all(_is_int(i) for i in ids)
            object.__setattr__(self, "decoder_ids", _int_row(ids, "decoder_ids") if one else
                               tuple(_int_row(r, "decoder_ids") for r in _rows(ids, "decoder_ids")))
        if self.decoder_text is not None and not isinstance(self.decoder_text, str):
            texts = tuple(self.decoder_text)
            if not texts or not all(isinstance(t, str) for t in texts):
                raise TracerError("`decoder_text` must be a str, or one str per row")
            object.__setattr__(self, "decoder_text", texts)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def of(cls, options: "InputOptions | None" = None, **given) -> "InputOptions":
        """The options to use: `options` with any keyword on top (a keyword that is no input option: TypeError)."""
        unknown = [k for k in given if k not in cls.names()]
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
        return replace(options, **given) if options is not None else cls(**given)

    def decoder_rows(self, n_rows: int) -> list | None:
        """The decoder's input per row: ids (tuples) or texts; None for the start token alone."""
        given = self.decoder_ids if self.decoder_ids is not None else self.decoder_text
        if given is None:
            return None
        if isinstance(given, str) or (given and _is_int(given[0])):
            return [given] * n_rows
        if len(given) != n_rows:
            what = "`decoder_ids`" if self.decoder_ids is not None else "`decoder_text`"
            raise TracerError(f"{what} gives {len(given)} decoder row(s) for {n_rows} input row(s)",
                              hint="give one decoder input for every row, or one per row")
        return list(given)


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _rows(value, what: str = "token_types") -> list:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence | np.ndarray):
        raise TracerError(f"`{what}` must be a list of rows of integers, not {type(value).__name__}")
    return list(value)


def _int_row(row, what: str) -> tuple[int, ...]:
    if isinstance(row, (str, bytes)) or not isinstance(row, Sequence | np.ndarray):
        raise TracerError(f"`{what}`: a row must be a list of integers, not {type(row).__name__}")
    for x in row:
        if not _is_int(x):
            raise TracerError(f"`{what}`: {x!r} is not an integer")
    return tuple(int(x) for x in row)
