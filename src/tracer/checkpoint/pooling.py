"""The sentence embedding a checkpoint declares: sentence-transformers' modules.json and its Pooling config.

modules.json lists the pipeline (Transformer, Pooling, Normalize, ...); the
Pooling module's config.json says mean, CLS, max or mean-sqrt-len pooling.
Without them tracer pools by the mean over real tokens, and says so.
"""

from __future__ import annotations

import json
from pathlib import Path

from tracer.arch.spec import PoolingSpec
from tracer.errors import TracerError

_MODES = (("pooling_mode_cls_token", "cls"), ("pooling_mode_mean_tokens", "mean"),
          ("pooling_mode_max_tokens", "max"), ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"))


def read_pooling(folder: Path) -> PoolingSpec:
    modules_path = folder / "modules.json"
    if not modules_path.is_file():
        return PoolingSpec()
    modules = _json(modules_path)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise TracerError(f"{modules_path}: expected a list of module objects")
    types = [str(m.get("type", "")) for m in modules]
    normalize = any(t.endswith(".Normalize") for t in types)
    pooling = next((m for m, t in zip(modules, types) if t.endswith(".Pooling")), None)
    if pooling is None:
        return PoolingSpec(normalize=normalize, source="modules.json (no Pooling module: mean)")
    config = folder / str(pooling.get("path", "")) / "config.json"
    if not config.is_file():
        raise TracerError(f"{folder}: modules.json names a Pooling module at {pooling.get('path')!r} without a config.json")
    cfg = _json(config)
    modes = [mode for key, mode in _MODES if isinstance(cfg, dict) and cfg.get(key) is True]
    if len(modes) != 1:
        raise TracerError(f"{config}: tracer supports exactly one pooling mode, the file enables {modes or 'none'}",
                          hint="one of pooling_mode_mean_tokens, _cls_token, _max_tokens, _mean_sqrt_len_tokens")
    return PoolingSpec(mode=modes[0], normalize=normalize, source="modules.json")


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TracerError(f"{path}: not valid JSON ({exc})") from None
