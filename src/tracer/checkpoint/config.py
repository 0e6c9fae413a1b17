"""config.json, read in both the transformers 4 and 5 layouts, through typed accessors.

Every field an adapter uses is read with one of `cfg_int`, `cfg_float`, `cfg_bool`, `cfg_choice`,
`cfg_list`; a value of the wrong type or out of range is one TracerError naming the field, the value
and the expected form. A field written as null is such a value too (transformers 5 refuses null where
its config class declares no None), unless the accessor is told `nullable=True`: then null means what
transformers makes of it, the same as a missing field (head_dim, num_key_value_heads, sliding_window...). Sizes have generous upper bounds (`LIMITS`), so a config that claims
10**9 layers fails here, before anything is allocated; `checkpoint.agreement.check_sizes` then
checks the sizes against the weight files.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Iterable

from tracer.checkpoint.jsonload import load_json
from tracer.errors import TracerError

_MISSING: Any = object()
MAX_CONFIG_BYTES = 16 * 1024 * 1024

# Upper bounds far above any published model (Llama 3 405B: 126 layers, 128 heads, d_model 16384).
LIMITS = {
    "layers": 4096,
    "heads": 4096,
    "d_model": 1 << 18,
    "d_ff": 1 << 20,
    "vocab": 1 << 24,
    "positions": 1 << 27,
}


def read_config(folder: Path) -> tuple[dict, str]:
    """The config as a dict, and the sha256 of the file's bytes (for the trace's model identity)."""
    path = folder / "config.json"
    if not path.is_file():
        if path.exists() or path.is_symlink():
            raise TracerError(f"{path}: not a regular file", hint="config.json must be an ordinary JSON file")
        raise TracerError(f"{folder}: no config.json", hint="a checkpoint folder holds config.json, *.safetensors and tokenizer.json")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise TracerError(f"{path}: {path.stat().st_size} bytes is too large for a config.json")
    raw = path.read_bytes()
    cfg = load_json(raw, str(path), constants=True)  # NaN/Infinity parse; the accessors refuse them where used
    if not isinstance(cfg, dict):
        raise TracerError(f"{path}: not a JSON object")
    return cfg, hashlib.sha256(raw).hexdigest()


# ---------- typed accessors ----------


def _keys(key: str | Iterable[str]) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def _lookup(cfg: dict, keys: tuple[str, ...]) -> tuple[str, Any]:
    """(the key found, its value); (keys[0], None) when no key has a non-null value."""
    for key in keys:
        if cfg.get(key) is not None:
            return key, cfg[key]
    return keys[0], None


def shown(value: Any, limit: int = 40) -> str:
    """A config value as the user wrote it, cut short."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def bad_field(family: str, key: str, value: Any, expected: str) -> TracerError:
    return TracerError(f"config.json ({family}): {key} is {shown(value)}, expected {expected}",
                       hint="fix config.json; the weights' shapes tell the true sizes")


def _missing(family: str, keys: tuple[str, ...]) -> TracerError:
    return TracerError(f"config.json of this {family} model has no {' or '.join(keys)}")


def _field(cfg: dict, key: str | Iterable[str], family: str, default: Any, form: str = "a value",
           nullable: bool = False) -> tuple[str, Any] | None:
    """(name, value) of the first key present; None when none is and a default stands in; an error otherwise.
    A key written as null is an error (`form`: what was expected) unless `nullable`."""
    keys = _keys(key)
    if not nullable:
        null = next((k for k in keys if k in cfg and cfg[k] is None), None)
        if null is not None:
            raise bad_field(family, null, None, form)
    name, value = _lookup(cfg, keys)
    if value is None:
        if default is _MISSING:
            raise _missing(family, keys)
        return None
    return name, value


def _int_form(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"an integer in [{minimum}, {maximum}]"
    if minimum is not None:
        return f"an integer >= {minimum}"
    return "an integer"


def cfg_int(cfg: dict, key: str | Iterable[str], family: str, *, minimum: int | None = 1,
            maximum: int | None = None, default: Any = _MISSING, nullable: bool = False) -> Any:
    """An integer field (an integral float such as 2048.0 is accepted); the first of several keys present."""
    form = _int_form(minimum, maximum)
    found = _field(cfg, key, family, default, form, nullable)
    if found is None:
        return default
    name, value = found
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_field(family, name, value, form)
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise bad_field(family, name, value, form)
        value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise bad_field(family, name, value, form)
    return value


def cfg_size(cfg: dict, key: str | Iterable[str], family: str, kind: str, default: Any = _MISSING,
             nullable: bool = False) -> Any:
    """A size (`kind` one of LIMITS: layers, heads, d_model, d_ff, vocab, positions): 1 <= n <= LIMITS[kind]."""
    return cfg_int(cfg, key, family, minimum=1, maximum=LIMITS[kind], default=default, nullable=nullable)


def cfg_float(cfg: dict, key: str | Iterable[str], family: str, *, minimum: float | None = None,
              maximum: float | None = None, above: float | None = None, default: Any = _MISSING,
              nullable: bool = False) -> Any:
    """A finite number; `minimum`/`maximum` inclusive, `above` exclusive."""
    parts = []
    if above is not None:
        parts.append(f"> {above:g}")
    if minimum is not None:
        parts.append(f">= {minimum:g}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}")
    form = "a finite number" + (" " + " and ".join(parts) if parts else "")
    found = _field(cfg, key, family, default, form, nullable)
    if found is None:
        return default
    name, value = found
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_field(family, name, value, form)
    try:
        number = float(value)
    except OverflowError:
        raise bad_field(family, name, value, form) from None
    if (not math.isfinite(number) or (above is not None and not number > above)
            or (minimum is not None and number < minimum) or (maximum is not None and number > maximum)):
        raise bad_field(family, name, value, form)
    return number


def cfg_bool(cfg: dict, key: str | Iterable[str], family: str, default: Any = _MISSING, nullable: bool = False) -> Any:
    """true or false."""
    found = _field(cfg, key, family, default, "true or false", nullable)
    if found is None:
        return default
    name, value = found
    if not isinstance(value, bool):
        raise bad_field(family, name, value, "true or false")
    return value


def cfg_choice(cfg: dict, key: str | Iterable[str], family: str, choices: Iterable[str], default: Any = _MISSING,
               nullable: bool = False) -> Any:
    """One string out of `choices`."""
    options = tuple(choices)
    found = _field(cfg, key, family, default, "one of " + ", ".join(options), nullable)
    if found is None:
        return default
    name, value = found
    if not isinstance(value, str) or value not in options:
        raise TracerError(f"config.json ({family}): {name} is {shown(value)}, which tracer does not support",
                          hint="supported: " + ", ".join(options))
    return value


def cfg_list(cfg: dict, key: str | Iterable[str], family: str, *, length: int | None = None,
             choices: Iterable[str] | None = None, default: Any = _MISSING, nullable: bool = False) -> Any:
    """A list (of `length` items; each one of `choices` when given)."""
    form = "a list" + (f" of {length} items" if length is not None else "")
    found = _field(cfg, key, family, default, form, nullable)
    if found is None:
        return default
    name, value = found
    if not isinstance(value, list) or (length is not None and len(value) != length):
        raise bad_field(family, name, value, form)
    if choices is not None:
        options = tuple(choices)
        for item in value:
            if not isinstance(item, str) or item not in options:
                raise TracerError(f"config.json ({family}): {name} holds {shown(item)}, which tracer does not support",
                                  hint="supported: " + ", ".join(options))
    return list(value)


def cfg_object(cfg: dict, key: str, family: str) -> dict:
    """A JSON object field; {} when absent or null."""
    value = cfg.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_field(family, key, value, "an object")
    return dict(value)


# ---------- rotary parameters ----------


def rope_parameters(cfg: dict, default_theta: float = 10000.0, family: str = "model",
                    default_partial: float = 1.0) -> dict:
    """One dict {rope_type, rope_theta, partial_rotary_factor, factor, ...} from either layout.

    transformers 5 writes `rope_parameters`; transformers 4 wrote top-level
    `rope_theta` (`rotary_emb_base` for GPT-NeoX), `rope_scaling` and
    `rotary_pct` / `partial_rotary_factor`. Values are not checked here (rope_spec reads them
    through the accessors).

    A key written null inside rope_parameters stays null, so that its accessor refuses it as transformers
    does (`rope_theta: null`, `rope_type: null`); so does a null top-level rope_theta / rotary_emb_base.
    """
    params = cfg_object(cfg, "rope_parameters", family)
    legacy = cfg_object(cfg, "rope_scaling", family)
    if "type" in legacy and "rope_type" not in legacy:
        legacy["rope_type"] = legacy.pop("type")
    merged = {**legacy, **params}
    if "rope_theta" not in merged:
        merged["rope_theta"] = next((cfg[k] for k in ("rope_theta", "rotary_emb_base") if k in cfg), default_theta)
    if "partial_rotary_factor" not in merged:  # a null top-level factor: the class's default, as transformers
        top = next((cfg[k] for k in ("partial_rotary_factor", "rotary_pct") if cfg.get(k) is not None), default_partial)
        merged["partial_rotary_factor"] = top
    merged.setdefault("rope_type", "default")
    return merged


def require(cfg: dict, *keys: str, family: str):
    """The first of `keys` present in the config; a clear error when none is.

    Prefer the typed accessors: this only checks presence (and refuses NaN/Infinity numbers).
    """
    for key in keys:
        value = cfg.get(key)
        if value is not None:
            if isinstance(value, float) and not math.isfinite(value):
                raise bad_field(family, key, value, "a finite number")
            return value
    raise _missing(family, keys)
