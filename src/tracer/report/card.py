"""The model card: what kind of transformer this is, in the words a person would use."""

from __future__ import annotations

STORAGE_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
                 "U8": "uint8", "BOOL": "bool"}
NORM_NAMES = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}
ACTIVATION_NAMES = {"silu": "SiLU", "gelu": "GELU", "gelu_tanh": "GELU (tanh)", "relu": "ReLU"}


def route(spec: dict) -> str:
    kind = spec.get("route") or ("decoder" if spec.get("causal", True) else "encoder")
    if kind == "encoder-decoder":
        return "encoder-decoder: encoder bidirectional, decoder causal + cross-attention"
    return "encoder, bidirectional" if kind == "encoder" else "decoder, causal mask"


def head_text(spec: dict) -> str:
    head = spec.get("head", "lm")
    if head == "mlm":
        return "masked-LM head: dense, activation, LayerNorm, decoder tied to the word embeddings"
    if head == "none":
        pooling = spec.get("pooling") or {}
        how = {"mean": "mean", "cls": "[CLS]", "max": "max", "mean_sqrt_len": "mean/sqrt(n)"}.get(pooling.get("mode"), "mean")
        return f"no head: {how} pooling" + (", L2-normalised" if pooling.get("normalize") else "") + \
            f" ({pooling.get('source', 'default')})"
    tied = "tied to the embedding" if spec.get("tied_embeddings") else "separate"
    scale = f", decoder output x {spec['logit_scale']:.4g} first" if spec.get("logit_scale") else ""
    return f"LM head, {tied}{scale}"


def norm_text(spec: dict) -> str:
    kind = NORM_NAMES.get(spec.get("norm"), spec.get("norm", "?"))
    offset = " x*(1+w)" if spec.get("norm_offset") else ""
    placement = {"sandwich": "pre- and post-sublayer", "after": "post-sublayer"}.get(
        spec.get("norm_placement", "pre"), spec.get("norm_placement", "pre") + "-norm")
    shared = ", one norm for attention and MLP" if spec.get("shared_norm") else ""
    return f"{placement} {kind}{offset}, eps {spec.get('norm_eps', 0):g}{shared}"


def positions_text(spec: dict) -> str:
    kind = spec.get("positions")
    if kind == "learned":
        off = spec.get("position_offset") or 0
        rule = "0..n-1 whatever the padding" if spec.get("position_rule") == "index" else "counted from the mask"
        return "learned absolute" + (f" (table offset {off})" if off else "") + f", {rule}"
    if kind == "rotary":
        rope = spec.get("rope") or {}
        text = f"rotary, theta {rope.get('theta', 0):,.0f}"
        if rope.get("rotary_dim") and rope["rotary_dim"] != spec.get("d_head"):
            text += f", first {rope['rotary_dim']} of {spec.get('d_head')} dims"
        if rope.get("scaling", "default") != "default":
            text += f", {rope['scaling']} scaling x{rope.get('factor', 1):g}"
        return text
    if kind == "relative":
        rel = spec.get("relative_bias") or {}
        return f"relative position bias: {rel.get('num_buckets')} buckets up to distance {rel.get('max_distance')}"
    return {"sinusoidal": "sinusoidal", "alibi": "ALiBi (linear bias on scores)"}.get(kind, str(kind))


def rope_scaling_text(spec: dict) -> str | None:
    """One line for a scaled rotary (None when plain): kind, factor, where it switches, the attention factor."""
    rope = spec.get("rope") or {}
    kind = rope.get("scaling", "default")
    parts = []
    if kind != "default":
        parts.append(f"{kind} x{rope.get('factor', 1):g}")
        if kind == "dynamic":
            parts.append(f"theta rescaled by length past {rope.get('max_positions')} positions")
        if kind == "yarn":
            parts.append(f"ramp from {rope.get('original_max_positions')} original positions")
        if kind == "longrope":
            parts.append(f"short factors up to {rope.get('original_max_positions')} positions, long past")
        if kind == "llama3":
            parts.append(f"from {rope.get('original_max_positions')} original positions")
        if rope.get("attention_factor", 1.0) != 1.0:
            parts.append(f"cos/sin x{rope['attention_factor']:.4g}")
    local = spec.get("rope_local")
    if local:
        parts.append(f"sliding layers: theta {local.get('theta', 0):,.0f}" +
                     (f", {local['scaling']}" if local.get("scaling", "default") != "default" else ""))
    return "; ".join(parts) or None


def attention_text(spec: dict) -> str:
    h, kv = spec["n_heads"], spec["n_kv_heads"]
    if kv == h:
        text = "multi-head"
    elif kv == 1:
        text = f"multi-query: 1 kv head for {h} query heads"
    else:
        text = f"grouped-query: {h // kv} query heads per kv head"
    windows = [w for w in spec.get("sliding_window") or () if w is not None]
    if windows:
        n = len(windows)
        text += f"; sliding window {min(windows)}" + (f" on {n} of {spec['n_layers']} layers" if n < spec["n_layers"] else "")
    return text


def score_scale(spec: dict) -> dict:
    """The factor q.k is multiplied by, as this family computes it, with a title and a sentence saying why.
    None in the spec is 1/sqrt(d_head); gemma2/gemma3 use query_pre_attn_scalar; T5 (and GPT-2 with
    scale_attn_weights = false) do not scale."""
    dh, scale, family = spec.get("d_head"), spec.get("attn_scale"), spec.get("family", "")
    if scale is None:
        return {"value": dh**-0.5 if dh else None, "title": "scale by √d_head",
                "text": f"divided by √d_head = √{dh} (× {dh**-0.5:.4g})" if dh else "divided by √d_head"}
    if scale == 1.0:
        why = ("T5 folds 1/√d_head into the initialisation of W_q" if family == "t5"
               else "the checkpoint sets scale_attn_weights = false" if family == "gpt2" else "this family's rule")
        return {"value": 1.0, "title": "no scaling (× 1)", "text": f"not scaled at all (× 1, not 1/√{dh}: {why})"}
    if family in ("gemma2", "gemma3_text", "gemma3"):
        scalar = round(scale**-2, 6)
        return {"value": scale, "title": "scale by √query_pre_attn_scalar",
                "text": f"multiplied by 1/√query_pre_attn_scalar = 1/√{scalar:g} (× {scale:.4g}; the config's "
                        f"query_pre_attn_scalar, {'equal to' if scalar == dh else 'not'} d_head = {dh})"}
    return {"value": scale, "title": f"scale by {scale:.4g}", "text": f"multiplied by {scale:.4g} (this family's scale, not 1/√{dh})"}


def mlp_text(spec: dict) -> str:
    act = ACTIVATION_NAMES.get(spec.get("activation"), spec.get("activation", "?"))
    return f"gated {act}" if spec.get("mlp") == "gated" else act


def storage_text(storage: dict) -> str:
    if not storage:
        return "?"
    names = {STORAGE_NAMES.get(k, k): v for k, v in storage.items()}
    if len(names) == 1:
        return next(iter(names))
    return ", ".join(f"{k} ({v})" for k, v in sorted(names.items(), key=lambda kv: -kv[1]))


def _not_used_text(not_used: dict | None) -> str:
    """Stored tensors the forward never reads (BERT's pooler): counted in the file, not by tracer cost."""
    if not not_used:
        return ""
    return f", {not_used['n_params']:,} of them stored but not used ({not_used['tensors'][0].rsplit('.', 2)[0]}.*)"


def params_text(n: int | None) -> str:
    if not n:
        return "?"
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit} ({n:,})"
    return f"{n:,}"


def model_card(meta: dict) -> dict:
    m = meta.get("model", {})
    spec = m.get("spec", {})
    return {
        "name": m.get("name"), "family": m.get("family", spec.get("family")),
        "route": route(spec), "norm": norm_text(spec), "norm_placement": spec.get("norm_placement", "pre"),
        "positions": positions_text(spec), "attention": attention_text(spec),
        "mlp": mlp_text(spec), "residual": spec.get("residual", "sequential"),
        "d_model": spec.get("d_model"), "n_layers": spec.get("n_layers"), "n_heads": spec.get("n_heads"),
        "n_kv_heads": spec.get("n_kv_heads"), "d_head": spec.get("d_head"), "d_ff": spec.get("d_ff"),
        "score_scale": score_scale(spec), "attn_softcap": spec.get("attn_softcap"),
        "vocab": spec.get("vocab_size"), "n_params": m.get("n_params"),
        "params": params_text(m.get("n_params")) + _not_used_text(m.get("stored_not_used")),
        "stored_not_used": m.get("stored_not_used"),
        "weight_dtype": storage_text(m.get("storage_dtypes") or {}), "compute_dtype": meta.get("dtype"),
        "tied_embeddings": spec.get("tied_embeddings"), "head": head_text(spec),
        "encoder": _encoder_card(spec.get("encoder")),
        "rope_scaling": rope_scaling_text(spec),
        "quantization": quantization_text(m.get("quantization")),
    }


def quantization_text(q: dict | None) -> str | None:
    """A GGUF file's ggml types, most parameters first: "Q4_K 4.5 bpw (121), Q6_K 6.56 bpw (25), F32 (65);
    4.89 bits per weight" (None for a safetensors checkpoint)."""
    if not q or not q.get("types"):
        return None
    parts = []
    for name, row in sorted(q["types"].items(), key=lambda kv: -kv[1].get("params", 0)):  # a saved trace sorts keys
        bpw = "" if name in ("F32", "F16", "BF16", "F64") else f" {row.get('bits_per_weight', 0):.3g} bpw"
        parts.append(f"{name}{bpw} ({row.get('tensors', 0)})")
    kind = f"{q['file_type']}: " if q.get("file_type") else ""
    return f"{kind}{', '.join(parts)}; {q.get('bits_per_weight', 0):.3g} bits per weight"


def _encoder_card(enc: dict | None) -> dict | None:
    """An encoder-decoder model's encoder stack, in the card's terms (None for single-stack models)."""
    if not enc:
        return None
    return {"n_layers": enc.get("n_layers"), "n_heads": enc.get("n_heads"), "d_ff": enc.get("d_ff"),
            "norm": norm_text(enc), "positions": positions_text(enc), "mlp": mlp_text(enc)}
