"""config.json, read in both the transformers 4 and 5 layouts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tracer.errors import TracerError


def read_config(folder: Path) -> tuple[dict, str]:
    """The config as a dict, and the sha256 of the file's bytes (for the trace's model identity)."""
    path = folder / "config.json"
    if not path.is_file():
        raise TracerError(f"{folder}: no config.json", hint="a checkpoint folder holds config.json, *.safetensors and tokenizer.json")
    raw = path.read_bytes()
    try:
        cfg = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TracerError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise TracerError(f"{path}: not a JSON object")
    return cfg, hashlib.sha256(raw).hexdigest()


def rope_parameters(cfg: dict, default_theta: float = 10000.0) -> dict:
    """One dict {rope_type, rope_theta, partial_rotary_factor, factor, ...} from either layout.

    transformers 5 writes `rope_parameters`; transformers 4 wrote top-level
    `rope_theta` (`rotary_emb_base` for GPT-NeoX), `rope_scaling` and
    `rotary_pct` / `partial_rotary_factor`.
    """
    params = dict(cfg.get("rope_parameters") or {})
    legacy = dict(cfg.get("rope_scaling") or {})
    if "type" in legacy and "rope_type" not in legacy:
        legacy["rope_type"] = legacy.pop("type")
    merged = {**legacy, **params}
    merged.setdefault("rope_theta", cfg.get("rope_theta", cfg.get("rotary_emb_base", default_theta)))
    if "partial_rotary_factor" not in merged:
        merged["partial_rotary_factor"] = cfg.get("partial_rotary_factor", cfg.get("rotary_pct", 1.0))
    merged.setdefault("rope_type", "default")
    return merged


def require(cfg: dict, *keys: str, family: str):
    """The first of `keys` present in the config; a clear error when none is."""
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    raise TracerError(f"config.json of this {family} model has no {' or '.join(keys)}")
