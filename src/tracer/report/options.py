"""What a person asked `tracer run` to show: sections, filters, and where to look."""

from __future__ import annotations

import re

from dataclasses import dataclass
from typing import Callable

from tracer.errors import TracerError

# Screen order. `top_k` is the next-token distribution; `lens`, `values` and `cost` are opt-in; `routing`
# shows for mixture-of-experts models only.
SECTIONS = ("model", "tokens", "steps", "values", "mask", "attention", "routing", "top_k", "pooled", "lens", "cost")
DEFAULT_SECTIONS = ("model", "tokens", "steps", "mask", "attention", "routing", "top_k")
ALIASES = {"card": "model", "shapes": "steps", "flow": "steps", "top": "top_k", "topk": "top_k",
           "distribution": "top_k", "next": "top_k", "attn": "attention", "value": "values", "embedding": "pooled",
           "pool": "pooled", "time": "cost", "experts": "routing", "moe": "routing", "router": "routing"}


@dataclass(frozen=True)
class RunOptions:
    batch_row: int = 0
    top_k: int = 10
    position: int | None = None  # None: the last real token of the batch row
    target_id: int | None = None  # resolved from --target by the command (it has the tokenizer)
    target_text: str | None = None
    target_note: str | None = None
    target_variants: tuple[dict, ...] = ()  # other spellings of the target (report.target); ranked when better
    layer: int | None = None  # attention and mask layer; None: the last
    head: int | None = None  # None: all heads, compactly
    attn_top: int | None = None  # each query's k strongest keys instead of a grid; None: chosen by width
    layers: tuple[int, ...] | None = None  # blocks shown in full in the shape flow; None: block 0
    steps: tuple[str, ...] = ()  # globs: show only these steps
    all_steps: bool = False  # unfold every block
    sections: tuple[str, ...] = DEFAULT_SECTIONS
    stack: str | None = None  # encoder-decoder: "encoder" or "decoder" (default) for the mask and attention views
    attn: str | None = None  # "self" or "cross" (encoder-decoder default: cross)


def resolve_sections(only: list[str] | None, lens: bool, values: bool, steps_filter: bool,
                     cost: bool = False) -> tuple[str, ...]:
    """--only names the sections; otherwise the default story, narrowed to the steps when --steps filters.

    --steps means "show me these steps": the engineer looking for one number gets the step table (and
    the values with --values) instead of the whole story around it.
    """
    if only:
        chosen = []
        for item in only:
            words = re.split(r"\s*,\s*|\s+", item.strip()) if item.strip() else []
            if "" in words:
                raise TracerError(f"--only {item.strip()!r}: an empty item (two commas in a row, or a comma at an end)",
                                  hint="choose from " + ", ".join(SECTIONS))
            for word in words:
                name = ALIASES.get(word.lower(), word.lower())
                if name not in SECTIONS:
                    raise TracerError(f"--only: unknown section {word!r}", hint="choose from " + ", ".join(SECTIONS))
                chosen.append(name)
        if not chosen:
            raise TracerError("--only names no section", hint="choose from " + ", ".join(SECTIONS))
    else:
        chosen = ["steps"] if steps_filter else list(DEFAULT_SECTIONS)
    if lens:
        chosen.append("lens")
    if values:
        chosen.append("values")
    if cost:
        chosen.append("cost")
    return tuple(s for s in SECTIONS if s in chosen)


VocabLookup = Callable[[int], dict]  # id -> {"piece": str, "bytes": hex str, "special": bool}


def ids_only_vocab(token_id: int) -> dict:
    """Without a tokenizer the only name a token has is its id."""
    return {"piece": f"<{token_id}>", "bytes": "", "special": False}
