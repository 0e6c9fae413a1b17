"""The model's inputs: prompts or token ids -> a padded Batch (below), and how far each stack's positions may go.

`--allow-long` lets an input go further only where no position table ends.

A learned absolute position table (GPT-2, BERT, OPT, BART, RoBERTa) has one row per position: past its last
row there is nothing to look up, so a longer input is refused, flag or not. Rotary positions are computed
from the position id and T5's relative buckets from distances, so those stacks run at any length;
max_position_embeddings only says how far the model was trained. There `allow_long` lets an input go
further, and a warning (code LONG_CODE) records which positions were past the limit: on the model card,
in `--json`, in the saved trace. Only the check changes; the numbers are those of a config with a larger
max_position_embeddings. A `dynamic` rope rescales past max_position_embeddings by design: no limit at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tracer.arch.spec import Spec
from tracer.checkpoint.jsonload import load_json_file
from tracer.checkpoint.tokenizer import Tokenizer
from tracer.engine.forward import ForwardInputs
from tracer.engine.masks import positions_by_rule
from tracer.errors import TracerError


LONG_CODE = "past-max-positions"
FLAG = "--allow-long"  # how the recorded warnings (trace data) name the switch
PARAM = "`allow_long`"  # how errors name it (the CLI says --allow-long)
_KIND_WORDS = {"rotary": "Rotary", "relative": "Relative"}


@dataclass(frozen=True)
class PositionLimit:
    """One stack's longest input: n positions (None: no limit), where that number comes from, and whether a
    learned table ends there (then nothing can go past it)."""

    n: int | None
    source: str  # "max_position_embeddings", "n_positions", "the tokenizer's model_max_length", ...
    kind: str  # the stack's positions: "learned" | "rotary" | "relative"
    stack: str = ""  # "" for a single-stack model, else "encoder" or "decoder"

    @property
    def table(self) -> bool:
        return self.kind == "learned"

    @property
    def owner(self) -> str:
        return f"this model's {self.stack}" if self.stack else "this model"

    def table_text(self) -> str:
        return (f"its learned position table ({self.source}) holds positions 0..{self.n - 1} only, "
                f"so there is no position {self.n}")

    def named(self) -> str:
        """The limit as a person reads it: "max_position_embeddings (128)"."""
        return f"{self.source} ({self.n})"

    def further_text(self) -> str:
        kind = _KIND_WORDS.get(self.kind, self.kind.capitalize())
        return f"{kind} positions can go further: {PARAM} (results past {self.n} are untrained territory)"


def stack_limit(spec: Spec, config: dict, folder: Path | None, stack: str = "") -> PositionLimit:
    """The limit of one stack: "" (a single-stack model), "encoder" or "decoder" (an encoder-decoder's).

    Its position table when it has one, else the config's max_position_embeddings (advisory for rotary and
    relative positions), else the tokenizer's model_max_length (T5's tokenizer says 512)."""
    own = spec.encoder if stack == "encoder" and spec.encoder is not None else spec
    if spec.rope is not None and spec.rope.scaling == "dynamic" and stack != "encoder":
        return PositionLimit(spec.max_positions, _config_key(config, spec), own.positions, stack)
    n = own.max_positions or spec.max_positions or spec.extras.get("max_position_embeddings")
    if n:
        return PositionLimit(n, _config_key(config, spec, n), own.positions, stack)
    n = tokenizer_max_length(folder) if folder is not None else None
    return PositionLimit(n, "the tokenizer's model_max_length", own.positions, stack)


def _config_key(config: dict, spec: Spec, n: int | None = None) -> str:
    """The config field the limit comes from, with what was taken off it when the table reserves rows."""
    key = "n_positions" if "n_positions" in config and spec.family in ("gpt2", "t5") else "max_position_embeddings"
    value = config.get(key)
    if n is not None and isinstance(value, int) and value != n:
        return f"{key} {value}, less {value - n} reserved rows"
    return key


def tokenizer_max_length(folder: Path) -> int | None:
    """tokenizer_config.json's model_max_length, when it is a real limit (transformers writes 1e30 for "none")."""
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return None
    try:
        data = load_json_file(path, constants=True)  # transformers writes 1e30; an unreadable file: no limit
    except TracerError:
        return None
    value = data.get("model_max_length") if isinstance(data, dict) else None
    return int(value) if isinstance(value, (int, float)) and 0 < value < 10**7 else None


def input_words(text: bool, n_rows: int) -> str:
    """How a length error names the input: "the prompt", "the longest prompt", "the input", ..."""
    if text:
        return "the prompt" if n_rows == 1 else "the longest prompt"
    return "the input" if n_rows == 1 else "the longest input row"


def check_positions(n_tokens: int, limit: PositionLimit, allow_long: bool, what: str) -> dict | None:
    """Refuse an input of n_tokens positions past the limit, unless allow_long and no table ends there; then
    return the warning to record. `what` names the input: "the prompt", "the decoder input", ... (see input_words)."""
    if limit.n is None or n_tokens <= limit.n:
        return None
    said = f"{what} is {n_tokens} tokens; {limit.owner} allows {limit.n}"
    if limit.table:
        if allow_long:
            raise TracerError(f"{PARAM} cannot help: {said}, and {limit.table_text()}",
                              hint=f"{PARAM} applies to rotary and relative positions, which have no table; "
                                   f"shorten the input to {limit.n} tokens")
        raise TracerError(f"{said}: {limit.table_text()}", hint=f"shorten the input to {limit.n} tokens")
    if not allow_long:
        raise TracerError(f"{said} ({limit.source}). {limit.further_text()}")
    return long_warning(limit, limit.n, n_tokens - 1)


def check_new_positions(used: int, n_new: int, limit: PositionLimit, allow_long: bool, what: str) -> None:
    """Generation: `used` positions (the prompt, or a decoder start token) and up to n_new more must fit."""
    if limit.n is None or used + n_new <= limit.n:
        return
    said = (f"{what} and `max_new_tokens` {n_new} asks for {n_new} more, but {limit.owner} allows {limit.n} "
            f"({limit.source}): at most {max(limit.n - used, 0)} new tokens fit")
    if limit.table:
        raise TracerError((f"{PARAM} cannot help: " if allow_long else "") + f"{said}; {limit.table_text()}")
    if not allow_long:
        raise TracerError(f"{said}. {limit.further_text()}")


def generation_warning(limit: PositionLimit, used: int, n_new: int) -> dict | None:
    """The new tokens' warning: new token t sits at position used + t; None when none of them is past the limit.
    The first one past it was chosen at step first - used and goes through the model from the next step."""
    if limit.n is None or limit.table or used + n_new <= limit.n:
        return None
    first, last = max(limit.n, used), used + n_new - 1
    step = first - used
    return long_warning(limit, first, last, step)


def long_warning(limit: PositionLimit, first: int, last: int, step: int | None = None) -> dict:
    """The record of an input past the limit: {code, level, message, data}, as the mask lab's warnings."""
    span = f"position {first}" if first == last else f"positions {first}..{last}"
    where = f"{limit.stack} " if limit.stack else ""
    if step is None:
        message = (f"{where}{span} {'is' if first == last else 'are'} past {limit.named()}: "
                   f"the model was not trained there ({FLAG})")
    elif step == 0 and first > limit.n:  # the prompt was already past the limit
        message = (f"the new tokens sit past {limit.named()} too, at {where}{span}: "
                   f"the model was not trained there ({FLAG})")
    else:
        message = (f"generation crossed {limit.named()} at step {step}: new tokens from step {step} on sit at "
                   f"{where}{span}, where the model was not trained ({FLAG})")
    data = {"stack": limit.stack or None, "limit": limit.n, "source": limit.source, "positions": limit.kind,
            "first": first, "last": last}
    if step is not None:
        data["step"] = step
    return {"code": LONG_CODE, "level": "warn", "message": message, "data": data}


# Prompts or token ids -> a padded batch: ids, attention mask, positions, and per-token descriptions.


@dataclass(frozen=True)
class Batch:
    inputs: ForwardInputs
    tokens: list[list[dict]]  # per row, per position: see Token.to_dict (pads included, marked)
    prompts: list[str | None]
    decoder_tokens: list[list[dict]] | None = None  # encoder-decoder: the decoder's input tokens
    position_rule: str = "mask"  # how the (encoder's) position ids were counted: "mask" or "index"
    warnings: tuple[dict, ...] = ()  # inputs past max_position_embeddings with allow_long (tracer.model.inputs)


def rows_from_text(texts: list[str], tok: Tokenizer | None, special_tokens: bool,
                   pair: str | None = None) -> tuple[list[list[dict]], list[str]]:
    """Tokenize each prompt (with `pair` as every row's second text, marked by the tokenizer's template)."""
    if tok is None:
        raise TracerError("this checkpoint folder has no tokenizer.json, so text cannot be tokenized", hint="pass exact token `ids`")
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
        raise TracerError(f"`pad_side` must be left or right, not {side!r}")
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
    """Rows with segment ids given by the user (token_types, `--token-types 0,0,1,1`), one per token, checked."""
    if n_types == 0:
        raise TracerError("this model has no token types (segment embeddings); `token_types` apply to the BERT family")
    if len(types) != len(rows):
        raise TracerError(f"`token_types` gives {len(types)} row(s) for {len(rows)} input row(s)")
    out = []
    for r, (row, t) in enumerate(zip(rows, types)):
        if len(t) != len(row):
            raise TracerError(f"`token_types` row {r} has {len(t)} ids for {len(row)} tokens", hint="one type per token, specials included")
        bad = [x for x in t if not 0 <= x < n_types]
        if bad:
            raise TracerError(f"token type {bad[0]} is outside [0, {n_types}) for this model")
        out.append([{**tok, "type": int(x)} for tok, x in zip(row, t)])
    return out
