"""The sentence embedding a checkpoint declares: sentence-transformers' modules.json and its Pooling config.

modules.json lists the pipeline (Transformer, Pooling, Normalize, ...); the
Pooling module's config.json says mean, CLS, max or mean-sqrt-len pooling.
Without them tracer pools by the mean over real tokens, and says so.
"""

from __future__ import annotations

from pathlib import Path

from tracer.arch.spec import PoolingSpec
from tracer.checkpoint.jsonload import load_json_file
from tracer.errors import TracerError

# sentence-transformers < 6 writes one boolean per mode; 6 writes `"pooling_mode": "mean"` (or a list of modes).
_LEGACY = (("pooling_mode_cls_token", "cls"), ("pooling_mode_mean_tokens", "mean"),
           ("pooling_mode_max_tokens", "max"), ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"),
           ("pooling_mode_weightedmean_tokens", "weightedmean"), ("pooling_mode_lasttoken", "lasttoken"))
_NAMES = {"cls": "cls", "mean": "mean", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len",
          "weightedmean": "weightedmean", "lasttoken": "lasttoken"}


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
    modes = _modes(_json(config))
    if len(modes) != 1 or modes[0] not in _NAMES.values():
        raise TracerError(f"{config}: tracer supports exactly one pooling mode, the file enables {modes or 'none'}",
                          hint="pooling_mode: " + ", ".join(_NAMES))
    return PoolingSpec(mode=modes[0], normalize=normalize, source="modules.json")


def _modes(cfg) -> list[str]:
    """The pooling modes a Pooling config.json enables, in either sentence-transformers layout."""
    if not isinstance(cfg, dict):
        return []
    if "pooling_mode" in cfg:
        given = cfg["pooling_mode"]
        given = [given] if isinstance(given, str) else given if isinstance(given, list) else []
        return [_NAMES.get(m, f"unknown {m!r}") if isinstance(m, str) else f"unknown {m!r}" for m in given]
    return [mode for key, mode in _LEGACY if cfg.get(key) is True]


def _json(path: Path):
    return load_json_file(path)
