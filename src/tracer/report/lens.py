"""Logit lens: read the residual stream after each block as if it were the last one.

For each layer's residual (embed.out, then blocks.{i}.resid_post), apply the
model's final norm and unembedding, exactly as the forward pass does after the
last block. Where the lens distribution starts agreeing with the real output is
where the prediction forms. Pure NumPy over a Trace and the model's weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracer.arch.spec import Spec
from tracer.engine.heads import lens_unembed
from tracer.engine.norms import norm
from tracer.engine.ops import softmax


@dataclass(frozen=True)
class LensLayer:
    layer: str  # "embed" or the block index as text
    step: str  # the residual step it reads
    probs: np.ndarray  # [vocab]


def residual_steps(n_layers: int, prefix: str = "") -> list[tuple[str, str]]:
    """(label, step name) of every residual stream position the lens reads, in order."""
    return [("embed", prefix + "embed.out")] + [(str(i), f"{prefix}blocks.{i}.resid_post") for i in range(n_layers)]


def lens_logits(resid: np.ndarray, W: dict, spec: Spec, prefix: str = "") -> np.ndarray:
    """[..., d_model] -> [..., vocab]: the final norm (when the model has one) and the unembedding."""
    x = norm(resid, W, prefix + "final_norm", spec) if spec.final_norm else resid
    return lens_unembed(x, W, spec)


def logit_lens(trace, W: dict, spec: Spec, row: int, position: int) -> list[LensLayer]:
    """One distribution per residual position, for one token; raises KeyError when a residual was not kept.

    Only a stack whose output feeds the LM head has a lens: a decoder, or the decoder of an encoder-decoder model."""
    if spec.head != "lm":
        raise ValueError("the logit lens reads a decoder stack through the LM head")
    prefix = "decoder." if spec.route == "encoder-decoder" else ""
    layers = []
    for label, name in residual_steps(spec.n_layers, prefix):
        resid = trace[name][row, position][None, None, :]  # [1, 1, d_model]
        probs = softmax(lens_logits(resid, W, spec, prefix))[0, 0]  # [vocab]
        layers.append(LensLayer(label, name, probs))
    return layers


def rank_of(probs: np.ndarray, token_id: int) -> int:
    """1-based rank of a token in a distribution (ties share the better rank)."""
    return int((probs > probs[token_id]).sum()) + 1


def lens_rows(layers: list[LensLayer], final_top: int) -> list[dict]:
    """Per layer: its own top token and how much it already believes the final answer."""
    rows = []
    for layer in layers:
        top = int(np.argmax(layer.probs))
        rows.append({
            "layer": layer.layer, "step": layer.step,
            "top_id": top, "top_prob": float(layer.probs[top]),
            "final_top_prob": float(layer.probs[final_top]), "final_top_rank": rank_of(layer.probs, final_top),
        })
    return rows
