"""Why `tracer run` and `tracer cost` count a checkpoint's parameters differently, said on both.

`tracer run`'s card counts every floating-point tensor stored in the checkpoint; `tracer cost` counts the
parameters the forward pass uses, from config.json. They differ by the tensors the family's adapter knowingly
ignores (`IGNORED`: BERT's `pooler.*`, which mean-pooling sentence encoders such as all-MiniLM-L6-v2 carry but
never read). This module finds those tensors from the safetensors headers alone (nothing is mapped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

FLOAT_CODES = ("F64", "F32", "F16", "BF16")


@dataclass(frozen=True)
class StoredNotUsed:
    n_params: int  # floating-point parameters stored but not read by the forward
    tensors: tuple[str, ...]

    def line(self, counted_by: str) -> str:
        names = ", ".join(self.tensors[:3]) + (f" and {len(self.tensors) - 3} more" if len(self.tensors) > 3 else "")
        return f"the checkpoint also stores {self.n_params:,} parameters the forward does not use ({names}); {counted_by}"

    def to_json(self) -> dict:
        return {"n_params": self.n_params, "tensors": list(self.tensors)}


def stored_not_used(folder: Path, cfg: dict, tied_embeddings: bool, files=None) -> StoredNotUsed | None:
    """The float tensors of `folder` that the family ignores by design; None when there are none (or no weights).
    files: the folder's WeightFiles when a loaded model has them already (its headers are not read again)."""
    from tracer.arch.registry import adapter_for
    from tracer.checkpoint.weights import WeightFiles
    from tracer.errors import TracerError

    globs = (*getattr(adapter_for(cfg), "IGNORED", ()), *(("lm_head.weight",) if tied_embeddings else ()))
    if not isinstance(files, WeightFiles):  # none given, or another reader's (a GGUF file stores no such tensors)
        if files is not None:
            return None
        try:
            files = WeightFiles(Path(folder))
        except TracerError:
            return None
    found: dict[str, int] = {}
    for f in files.files:
        for name, entry in f.entries.items():
            if entry.dtype in FLOAT_CODES and any(fnmatchcase(name, g) for g in globs):
                found[name] = math.prod(entry.shape)
    if not found:
        return None
    return StoredNotUsed(sum(found.values()), tuple(found))
