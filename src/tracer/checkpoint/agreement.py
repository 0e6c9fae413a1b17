"""Config and checkpoint agree both ways: the config's sizes fit in the files, and every weight is used.

An adapter module may declare the HF tensors it knowingly ignores as globs in a module attribute,
e.g. `IGNORED = ("pooler.*", "*.rotary_emb.inv_freq")`; `load_model` reads it with getattr.
Non-float tensors (int64 `embeddings.position_ids`, bool causal-mask buffers) are never counted as unused.
"""

from __future__ import annotations

import math
from fnmatch import fnmatchcase
from typing import Iterable, Mapping

from tracer.checkpoint.weights import WeightFiles
from tracer.errors import TracerError

FLOAT_CODES = ("F64", "F32", "F16", "BF16")


def stored_elements(files: WeightFiles) -> int:
    """Elements held by all tensors of the checkpoint, read from the headers (nothing is mapped)."""
    return sum(math.prod(f.entries[name].shape) for f in files.files for name in f.entries)


def implied_elements(shapes: Mapping[str, tuple[int, ...]], hf_names: Mapping[str, str]) -> int:
    """A lower bound on the elements the config implies: per HF tensor, its largest canonical slice
    (fused q/k/v and tied heads read one stored tensor several times)."""
    largest: dict[str, int] = {}
    for name, shape in shapes.items():
        key = hf_names.get(name, name)
        largest[key] = max(largest.get(key, 0), math.prod(shape))
    return sum(largest.values())


def check_sizes(files: WeightFiles, shapes: Mapping[str, tuple[int, ...]], hf_names: Mapping[str, str],
                summary: str) -> None:
    """Refuse a config whose sizes need more numbers than the weight files hold, before anything is read."""
    need, have = implied_elements(shapes, hf_names), stored_elements(files)
    if need > have:
        raise TracerError(
            f"config.json disagrees with the weights: its sizes ({summary}) need at least {need:,} numbers, "
            f"but the safetensors files hold {have:,}",
            hint="the config claims more (or larger) layers than the checkpoint has",
        )


def unused_weights(files: WeightFiles, used: Iterable[str], ignored: Iterable[str] = ()) -> list[str]:
    """Float tensors in the files that no canonical weight reads and no IGNORED glob names, in file order."""
    taken, globs = set(used), tuple(ignored)
    return [
        name for name in files.names()
        if name not in taken and files.storage_dtype(name) in FLOAT_CODES
        and not any(fnmatchcase(name, g) for g in globs)
    ]


def check_unused(files: WeightFiles, used: Iterable[str], allow_unused: bool, ignored: Iterable[str] = ()) -> list[str]:
    """The unused weights; an error unless `allow_unused` (then the caller shows them as a warning)."""
    unused = unused_weights(files, used, ignored)
    if unused and not allow_unused:
        more = f" and {len(unused) - 1} more" if len(unused) > 1 else ""
        raise TracerError(
            f"config.json disagrees with the weights: {unused[0]}{more} in the checkpoint is not used by this config",
            hint="a config with fewer layers than the checkpoint, or a head tracer does not run; "
            "`allow_unused` runs anyway",
        )
    return unused
