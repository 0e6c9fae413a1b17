"""A trace's metadata, typed: RunMeta is written by Model.run and by generation, read back as a dict.

`to_dict()` gives the JSON the trace file stores (its keys are the file format: see DESIGN.md, the trace
file); Trace.meta holds that dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tracer import __version__


@dataclass(frozen=True)
class ModelMeta:
    """Which model made the trace: the folder's name, family, route, config hash, spec, sizes."""

    name: str
    family: str
    route: str
    config_sha256: str
    spec: dict
    n_params: int
    storage_dtypes: dict[str, int]
    quantization: dict | None = None  # a GGUF file's quantization (types, bits per weight)

    @classmethod
    def of(cls, model) -> "ModelMeta":
        return cls(model.folder.name, model.family, model.route, model.config_sha256, model.spec.to_dict(),
                   model.n_params, model.files.storage_dtypes(), getattr(model, "quantization", None) or None)

    def to_dict(self) -> dict:
        out = {"name": self.name, "family": self.family, "route": self.route, "config_sha256": self.config_sha256,
               "spec": self.spec, "n_params": self.n_params, "storage_dtypes": self.storage_dtypes}
        return out | ({"quantization": self.quantization} if self.quantization else {})


@dataclass
class RunMeta:
    model: ModelMeta
    dtype: str
    prompts: list
    tokens: list[list[dict]]
    pad_side: str
    special_tokens: bool
    positions: str  # the (encoder's) position rule: "mask" or "index"
    mask: dict  # see built_mask / override_mask
    keep: list[str]
    reduced_to_stats: list[str]
    computed_in_blocks: list[str] | None = None  # a run's steps computed in blocks (generation: not recorded)
    generation: dict | None = None  # tracer generate --save: steps, sampling, eos ids, rows
    warnings: list[dict] = field(default_factory=list)  # inputs past max_position_embeddings (allow_long)
    pair: str | None = None
    decoder_tokens: list[list[dict]] | None = None
    tracer_version: str = __version__

    def to_dict(self) -> dict:
        out = {"tracer_version": self.tracer_version, "model": self.model.to_dict(), "dtype": self.dtype,
               "prompts": self.prompts, "tokens": self.tokens, "pad_side": self.pad_side,
               "special_tokens": self.special_tokens, "positions": self.positions, "mask": self.mask,
               "keep": list(self.keep), "reduced_to_stats": self.reduced_to_stats}
        optional = {"computed_in_blocks": self.computed_in_blocks, "generation": self.generation,
                    "warnings": list(self.warnings) or None, "pair": self.pair, "decoder_tokens": self.decoder_tokens}
        out.update({k: v for k, v in optional.items() if v is not None})
        return out


def layer_windows(spec) -> dict[str, int | None]:
    return {str(i): spec.window(i) for i in range(spec.n_layers)}


def built_mask(spec, route: str, attention_mask: np.ndarray, fully_masked: dict,
               encoder_mask: np.ndarray | None = None) -> dict:
    """The mask tracer built: route, causal, windows per layer, padding, rows with no key per window."""
    meta = {"source": "built", "route": route, "causal": spec.causal, "windows": layer_windows(spec),
            "padding": bool((attention_mask == 0).any()), "fully_masked": fully_masked}
    if encoder_mask is not None:
        meta["encoder_padding"] = bool((encoder_mask == 0).any())
    return meta


def override_mask(spec, note: str, keep: np.ndarray, read: dict | None = None) -> dict:
    """A mask given from outside (Model.run(mask=...)); `read`: how the mask lab read it."""
    meta = {"source": "override", "note": note, "windows": layer_windows(spec), "fully_masked": fully_masked_rows(keep)}
    if read is not None:
        meta["read"] = read
    return meta


def fully_masked_rows(keep: np.ndarray) -> list[list[int]]:
    """[[batch, head, query], ...] rows with no key to attend to (their weights are all zero)."""
    rows = ~keep.any(axis=-1)  # [batch, heads, q]
    return [list(map(int, idx)) for idx in np.argwhere(rows)]
