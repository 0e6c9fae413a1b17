"""What the last residual stream becomes: logits over the vocabulary (LM or MLM head) or one pooled sentence vector."""

from __future__ import annotations

import numpy as np

from tracer.arch.spec import PoolingSpec, Spec
from tracer.engine.ops import ACTIVATIONS, layer_norm, linear, softcap
from tracer.engine.ports import StepSink, Weights

_BTD = ("batch", "pos", "d_model")


def unembed(x: np.ndarray, W: Weights, spec: Spec) -> np.ndarray:
    """[batch, pos, d_model] -> logits [batch, pos, vocab] (T5's tied head scales by d_model**-0.5 first)."""
    if spec.logit_scale is not None:
        x = x * x.dtype.type(spec.logit_scale)
    return linear(x, W["unembed.W_U"], W.get("unembed.b_U"))


def lens_unembed(x: np.ndarray, W: Weights, spec: Spec) -> np.ndarray:
    """What the head does after the final norm, in one call (the logit lens): OPT-350m's project_out, the
    unembedding, gemma2's final soft-capping."""
    if spec.d_embed is not None:
        x = linear(x, W["project_out.W"])
    logits = unembed(x, W, spec)
    return softcap(logits, spec.logit_softcap) if spec.logit_softcap is not None else logits


def unembed_op(spec: Spec, source: str) -> str:
    scaled = f"({source} * {spec.logit_scale:.4g})" if spec.logit_scale is not None else source
    return f"{scaled} @ W_U" + (" + b_U" if spec.head_bias else "")


def mlm_transform(x: np.ndarray, W: Weights, spec: Spec, rec: StepSink) -> np.ndarray:
    """BERT/RoBERTa's prediction-head transform: dense, activation, LayerNorm -> [batch, pos, d_model]."""
    h = rec("head.dense", linear(x, W["head.W_dense"], W["head.b_dense"]), _BTD, "x @ W_dense + b_dense")
    a = rec("head.act", ACTIVATIONS[spec.head_activation](h), _BTD, f"{spec.head_activation}(head.dense)")
    return rec("head.ln.out", layer_norm(a, W["head.ln.w"], W["head.ln.b"], spec.norm_eps), _BTD, "LayerNorm(head.act)")


def pool(x: np.ndarray, attention_mask: np.ndarray, pooling: PoolingSpec) -> np.ndarray:
    """[batch, pos, d_model] -> [batch, d_model] over the real tokens, as sentence-transformers pools."""
    real = (attention_mask != 0)[..., None]  # [batch, pos, 1]
    count = np.maximum(real.sum(axis=1), 1).astype(x.dtype)  # [batch, 1]
    rows = np.arange(x.shape[0])
    if pooling.mode == "cls":  # the first real token (left padding respected, as sentence-transformers 6)
        v = x[rows, np.argmax(attention_mask != 0, axis=1)]
    elif pooling.mode == "lasttoken":
        v = x[rows, x.shape[1] - 1 - np.argmax((attention_mask != 0)[:, ::-1], axis=1)]
    elif pooling.mode == "max":
        v = np.where(real, x, -np.inf).max(axis=1).astype(x.dtype)
    elif pooling.mode == "weightedmean":  # weights 1, 2, 3, ... from the first real token
        w = (np.cumsum(attention_mask != 0, axis=1) * (attention_mask != 0)).astype(x.dtype)[..., None]
        v = (x * w).sum(axis=1) / np.maximum(w.sum(axis=1), x.dtype.type(1e-9))
    else:
        v = np.where(real, x, 0).sum(axis=1) / (count if pooling.mode == "mean" else np.sqrt(count))
    if pooling.normalize:
        v = v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), x.dtype.type(1e-12))  # torch F.normalize
    return v.astype(x.dtype, copy=False)


def pool_op(pooling: PoolingSpec) -> str:
    what = {"mean": "mean over real tokens", "cls": "the first real token ([CLS])", "max": "max over real tokens",
            "mean_sqrt_len": "sum over real tokens / sqrt(count)", "lasttoken": "the last real token",
            "weightedmean": "mean weighted 1, 2, 3, ... over real tokens"}[pooling.mode]
    return what + (", L2-normalised" if pooling.normalize else "") + f" ({pooling.source})"
