"""Exports of the fixtures with torch's two ONNX exporters, as porters make them (live tests only).

The TorchScript exporter (`dynamo=False`) traces Python ints as graph inputs, so transformers'
`logits_to_keep` would become a Gather of one position: it exports a thin wrapper whose attributes carry
the model's own module names (`model`, `lm_head`, ...), so the scopes are transformers' paths. The dynamo
exporter takes the model itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _load(folder: Path):
    import transformers

    from tracer.capture.hf_routes import auto_class

    config = transformers.AutoConfig.from_pretrained(folder)
    cls = auto_class(transformers, config)
    model = cls.from_pretrained(folder, attn_implementation="eager").eval()
    return model, config


def _inputs(torch, config, ids: np.ndarray, decoder_ids: np.ndarray | None):
    args = {"input_ids": torch.tensor(ids), "attention_mask": torch.ones(ids.shape, dtype=torch.int64)}
    if decoder_ids is not None:
        args["decoder_input_ids"] = torch.tensor(decoder_ids)
    return args



def export(folder: Path, out: Path, exporter: str, ids: np.ndarray, decoder_ids: np.ndarray | None = None) -> Path:
    import torch

    model, config = _load(folder)
    kwargs = _inputs(torch, config, ids, decoder_ids)
    names = list(kwargs)
    if exporter == "dynamo":
        batch, pos = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("pos", min=2, max=64)
        shapes = {n: {0: batch, 1: pos} if n != "decoder_input_ids" else {0: batch, 1: torch.export.Dim("dec", min=1, max=64)}
                  for n in names}
        torch.onnx.export(model, (), str(out), kwargs={**kwargs, "use_cache": False}, dynamo=True,
                          dynamic_shapes={**shapes, "use_cache": None}, verbose=False)
        return out
    wrapped = _wrap(torch, model, names)
    torch.onnx.export(wrapped, tuple(kwargs[n] for n in names), str(out), input_names=names, dynamo=False,
                      dynamic_axes={n: {0: "batch", 1: "pos" if n != "decoder_input_ids" else "dec"} for n in names},
                      opset_version=17)
    return out


def _wrap(torch, model, names: list[str]):
    """model's children under their own attribute names; forward calls the model's forward unchanged
    except that a head gets all positions and no cache comes back."""

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name, child in model.named_children():
                self.add_module(name, child)
            self._forward = model.forward

        def forward(self, *args):
            out = self._forward(**dict(zip(names, args)), use_cache=False, return_dict=True)
            return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state

    return Wrapped()
