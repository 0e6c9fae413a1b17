"""Which layers attend through a sliding window, and how wide, as transformers 5.24 decides per family.

A window of W keeps W keys, the query's own included (key j visible from query i iff i - W < j <= i).
transformers builds the mask of a "sliding_attention" layer from `config.sliding_window`; when that is
null (or 0) on a layer that slides, transformers fails (or masks every key), so tracer refuses the config.

- every layer (mistral, mixtral, phi3, starcoder2): `sliding_window`, null = full attention everywhere;
  mistral ignores `layer_types` (transformers only warns);
- qwen3_moe: every layer, but only with `use_sliding_window: true` (its config has no layer_types);
- qwen2, qwen3: `layer_types`, else layers i >= max_window_layers (default 28) slide, with
  `use_sliding_window: true`;
- qwen2_moe: `layer_types`, else even-numbered layers i < max_window_layers (default 28) slide;
- gemma2, gemma3: `layer_types`, else every other layer (gemma2) or 5 of every `sliding_window_pattern`
  (default 6, gemma3) slide, whatever use_sliding_window says.
"""

from __future__ import annotations

from tracer.checkpoint.config import cfg_bool, cfg_int, cfg_list, cfg_size
from tracer.errors import TracerError

LAYER_TYPES = ("full_attention", "sliding_attention")
QWEN_MAX_WINDOW_LAYERS = 28  # transformers' default for qwen2, qwen3 and qwen2_moe
DEFAULT_WINDOW = 4096  # transformers' sliding_window when the field is missing (mistral, qwen*, gemma2/3)


def window_size(cfg: dict, family: str, absent: int | None = None) -> int | None:
    """`sliding_window`: an integer >= 0; None when null; `absent` (the config class's default) when missing."""
    if "sliding_window" not in cfg:
        return absent
    return cfg_int(cfg, "sliding_window", family, minimum=0, maximum=1 << 31, default=None, nullable=True)


def _used(window: int | None, family: str, why: str) -> int:
    """The window of a layer that slides: it must be a size, not null or 0."""
    if not window:
        raise TracerError(f"config.json ({family}): {why}, but sliding_window is {window if window is not None else 'null'}",
                          hint="give sliding_window a size >= 1, or mark the layers full_attention")
    return window


def every_layer(cfg: dict, family: str, switch: str | None = None, absent: int | None = None) -> tuple[int | None, ...]:
    """The same window on every layer (None: full attention); `switch` names a flag that must be true first;
    `absent`: the window of a config without the field (mistral, qwen3_moe: 4096)."""
    n_layers = cfg_size(cfg, "num_hidden_layers", family, "layers")
    if switch is not None and not cfg_bool(cfg, switch, family, default=False):
        return (None,) * n_layers
    window = window_size(cfg, family, absent)
    if window is None:
        return (None,) * n_layers
    return (_used(window, family, "every layer slides"),) * n_layers


def by_layer_types(cfg: dict, family: str, window: int | None, default_types) -> tuple[int | None, ...]:
    """Per layer from `layer_types` (else `default_types(n_layers)`): the window on "sliding_attention" layers."""
    n_layers = cfg_size(cfg, "num_hidden_layers", family, "layers")
    types = cfg_list(cfg, "layer_types", family, length=n_layers, choices=LAYER_TYPES, default=None, nullable=True)
    types = types or default_types(n_layers)
    if "sliding_attention" in types:
        _used(window, family, "layer_types has sliding_attention layers")
    return tuple(window if t == "sliding_attention" else None for t in types)


def qwen_windows(cfg: dict, family: str) -> tuple[int | None, ...]:
    """qwen2, qwen3: without layer_types, layers from max_window_layers on slide (use_sliding_window: true)."""
    on = cfg_bool(cfg, "use_sliding_window", family, default=False)
    window = window_size(cfg, family, DEFAULT_WINDOW) if on else None
    start = cfg_int(cfg, "max_window_layers", family, minimum=0, maximum=1 << 16, default=QWEN_MAX_WINDOW_LAYERS)

    def default_types(n: int) -> list[str]:  # transformers: only when the window survived use_sliding_window
        return ["sliding_attention" if window is not None and i >= start else "full_attention" for i in range(n)]

    return by_layer_types(cfg, family, window, default_types)


def qwen2_moe_windows(cfg: dict, family: str) -> tuple[int | None, ...]:
    """qwen2_moe: without layer_types, even-numbered layers below max_window_layers (use_sliding_window: true)."""
    on = cfg_bool(cfg, "use_sliding_window", family, default=False)
    window = window_size(cfg, family, DEFAULT_WINDOW) if on else 0
    below = cfg_int(cfg, "max_window_layers", family, minimum=0, maximum=1 << 16, default=QWEN_MAX_WINDOW_LAYERS)

    def default_types(n: int) -> list[str]:
        return ["sliding_attention" if on and (i + 1) % 2 and i < below else "full_attention" for i in range(n)]

    return by_layer_types(cfg, family, window, default_types)
