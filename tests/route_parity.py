"""Encoder and encoder-decoder parity helpers, shared by test_parity_routes and test_parity_live: run tracer
on a reference's exact inputs, compare step by step over real positions (the tolerance rule is in
test_parity_routes' docstring), and the steps that must be compared."""

from __future__ import annotations

import numpy as np

from tracer.steps import describe, stack_of
from tracer.trace import Trace

ATOL32, ATOL64 = 1e-5, 1e-10


def _rows(ids: np.ndarray, mask: np.ndarray) -> list[list[int]]:
    return [[int(t) for t, m in zip(r, mr) if m] for r, mr in zip(ids, mask)]


def run_like(model, ref: Trace, dtype_model=None):
    """Run tracer on exactly the reference's inputs (ids, padding side, token types, decoder ids)."""
    ids = ref["input.ids"]
    mask = ref["input.mask"] if "input.mask" in ref else np.ones_like(ids)
    kwargs = {"pad_side": "left" if mask[:, 0].min() == 0 else "right"}
    if "input.token_types" in ref:
        kwargs["token_types"] = _rows(ref["input.token_types"], mask)
    if "input.decoder_ids" in ref:
        dec = ref["input.decoder_ids"]
        dmask = ref["input.decoder_mask"] if "input.decoder_mask" in ref else np.ones_like(dec)
        rows = _rows(dec, dmask)
        assert all(r == rows[0] for r in rows), "the references use one decoder input for every row"
        kwargs["decoder_ids"] = rows[0]
    return (dtype_model or model).run(ids=_rows(ids, mask), **kwargs)


def _real(name: str, arr: np.ndarray, enc_mask: np.ndarray, dec_mask: np.ndarray | None) -> np.ndarray:
    """Zero the padded query positions of a step, by the stack its rows belong to."""
    axes = describe(name).axes
    decoder_rows = stack_of(name) == "decoder" or (dec_mask is not None and name in ("logits", "probs"))
    rows = dec_mask if decoder_rows else enc_mask
    if name.endswith(("cross_attn.k", "cross_attn.v")):
        rows = enc_mask
    keep = rows.astype(bool)
    if "q_len" in axes:
        return np.where(keep[:, None, :, None], arr, 0)
    if axes[:2] == ("batch", "pos") or axes[:2] == ("batch", "dec_pos"):
        return np.where(keep.reshape(keep.shape + (1,) * (arr.ndim - 2)), arr, 0)
    if len(axes) == 4 and axes[3] == "d_head":  # q/k/v [batch, heads, pos, d_head]
        return np.where(keep[:, None, :, None], arr, 0)
    return arr


def compare(ref: Trace, ours: Trace, atol: float) -> dict[str, float]:
    """Per step: max error as a fraction of its allowed error (<= 1 passes)."""
    enc = ref["input.mask"] if "input.mask" in ref else np.ones_like(ref["input.ids"])
    dec = ref["input.decoder_mask"] if "input.decoder_mask" in ref else (
        np.ones_like(ref["input.decoder_ids"]) if "input.decoder_ids" in ref else None)
    errors = {}
    for step in ref.steps:
        if step.array is None or step.name.startswith("input.") or step.name not in ours:
            continue
        a, b = ours[step.name], step.array
        assert a.shape == b.shape, f"{step.name}: {a.shape} vs {b.shape}"
        ra = _real(step.name, a.astype(np.float64), enc, dec)
        rb = _real(step.name, b.astype(np.float64), enc, dec)
        errors[step.name] = float(np.abs(ra - rb).max()) / (atol * max(1.0, float(np.abs(rb).max())))
    bad = {k: v for k, v in errors.items() if not v <= 1.0}
    assert not bad, f"steps beyond the tolerance (as a fraction of it): {bad}"
    return errors


def must_compare(model) -> list[str]:
    """The steps the issue names: embeddings, every block output and attention matrix, final norms, outputs."""
    spec = model.spec
    if spec.route == "encoder":
        names = ["embed.out"] + [f"blocks.{i}.{s}" for i in range(spec.n_layers) for s in ("resid_post", "attn.weights")]
        return names + (["logits"] if spec.head == "mlm" else ["pooled"])
    names = []
    for prefix, s in (("encoder.", spec.encoder), ("decoder.", spec)):
        names.append(prefix + "embed.out")
        names += [f"{prefix}blocks.{i}.{x}" for i in range(s.n_layers) for x in ("resid_post", "attn.weights")]
        if s.final_norm:
            names.append(prefix + "final_norm.out")
    names += [f"decoder.blocks.{i}.cross_attn.weights" for i in range(spec.n_layers)]
    return names + ["logits"]
