"""GGUF metadata -> the transformers-style config dict the family adapters read, and GGUF tensors -> the HF
names the adapters ask for (with the converter's changes undone).

The keys every architecture shares (`{arch}.block_count`, `.attention.head_count`, `.rope.freq_base`, ...)
are read here; what one family's converter does differently lives in that family's GGUF table
(tracer.arch.gguf_llama, gguf_gemma, gguf_gpt2, gguf_moe): a `GGUFFamily`."""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from tracer.checkpoint.gguf import GGUFFile, Piece, gguf_module
from tracer.errors import TracerError

Undo = Callable[[np.ndarray], np.ndarray]

# GGUF architecture -> the module holding its table
GGUF_TABLES = {
    "llama": "gguf_llama", "qwen2": "gguf_llama", "qwen3": "gguf_llama", "olmo2": "gguf_llama",
    "starcoder2": "gguf_llama", "phi3": "gguf_llama",
    "qwen2moe": "gguf_moe", "qwen3moe": "gguf_moe",
    "gemma": "gguf_gemma", "gemma2": "gguf_gemma", "gemma3": "gguf_gemma",
    "gpt2": "gguf_gpt2",
}


@dataclass(frozen=True)
class GGUFFamily:
    """What one GGUF architecture's converter did, to read it back as a transformers checkpoint."""

    model_type: str  # the transformers family whose adapter runs it
    config: Callable[[GGUFFile, dict], dict] = lambda f, cfg: cfg  # family keys on top of the common ones
    undo: Callable[[str, dict], Undo | None] = lambda hf_name, cfg: None  # per HF tensor, on float32 NumPy
    experts: tuple[str, str, str] | None = None  # HF per-expert tensor names of gate, up, down ("{e}" = index)
    transposed: tuple[str, ...] = ()  # HF name endings stored transposed in the GGUF (GPT-2's Conv1D)


def gguf_family(arch: str) -> GGUFFamily:
    module = GGUF_TABLES.get(arch)
    if module is None:
        raise TracerError(f"GGUF architecture {arch!r} is not supported",
                          hint="supported GGUF architectures: " + ", ".join(GGUF_TABLES))
    return importlib.import_module(f"tracer.arch.{module}").GGUF[arch]


def hf_config(f: GGUFFile, family: GGUFFamily) -> dict:
    """The config.json transformers would have had, as far as the GGUF records it."""
    return family.config(f, common_config(f, family.model_type))


def key(f: GGUFFile, name: str, default=None):
    """`{arch}.name` from the metadata."""
    return f.metadata.get(f"{f.arch}.{name}", default)


def common_config(f: GGUFFile, model_type: str) -> dict:
    d_model, n_heads = key(f, "embedding_length"), key(f, "attention.head_count")
    cfg: dict = {"model_type": model_type}
    put = _putter(cfg)
    put("num_hidden_layers", key(f, "block_count"))
    put("hidden_size", d_model)
    put("intermediate_size", _first(key(f, "feed_forward_length")))
    put("num_attention_heads", _first(n_heads))
    put("num_key_value_heads", _first(key(f, "attention.head_count_kv")))
    put("head_dim", key(f, "attention.key_length"))
    put("rms_norm_eps", key(f, "attention.layer_norm_rms_epsilon"))
    put("layer_norm_epsilon", key(f, "attention.layer_norm_epsilon"))
    put("max_position_embeddings", key(f, "context_length"))
    put("sliding_window", key(f, "attention.sliding_window"))
    put("attn_logit_softcapping", key(f, "attn_logit_softcapping"))
    put("final_logit_softcapping", key(f, "final_logit_softcapping"))
    embed = f.tensors.get("token_embd.weight")
    if embed is None:
        raise TracerError(f"{f.path}: the GGUF file has no token_embd.weight")
    cfg["vocab_size"] = embed.shape[0]
    cfg["tie_word_embeddings"] = "output.weight" not in f.tensors
    for ours, theirs in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                         ("pad_token_id", "padding_token_id")):
        put(ours, f.metadata.get(f"tokenizer.ggml.{theirs}"))
    if isinstance(n_heads, int) and isinstance(d_model, int):
        cfg["rope_parameters"] = rope_parameters(f, cfg.get("head_dim") or d_model // max(n_heads, 1))
    return cfg


def rope_parameters(f: GGUFFile, d_head: int) -> dict:
    """rope.* keys, and the factor tensors llama3 (`rope_freqs`) and longrope (`rope_factors_*`) become."""
    rp: dict = {"rope_type": "default", "rope_theta": float(key(f, "rope.freq_base", 10000.0))}
    dims = key(f, "rope.dimension_count")
    if isinstance(dims, int) and 0 < dims < d_head:
        rp["partial_rotary_factor"] = dims / d_head
    kind = key(f, "rope.scaling.type")
    factor = key(f, "rope.scaling.factor")
    original = key(f, "rope.scaling.original_context_length")
    if kind == "linear" and factor:
        rp.update(rope_type="linear", factor=float(factor))
    elif kind == "yarn" and factor:
        rp.update(rope_type="yarn", factor=float(factor), original_max_position_embeddings=original)
        for ours, theirs in (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow"),
                             ("attention_factor", "yarn_attn_factor")):
            if key(f, f"rope.scaling.{theirs}") is not None:
                rp[ours] = float(key(f, f"rope.scaling.{theirs}"))
    freqs = f.tensors.get("rope_freqs.weight")
    if freqs is not None:
        # llama3 scaling, stored by the converter as the divisor of each frequency (ggml divides theta^(-2j/d)
        # by it): read back as llama3's parameters when the factors determine them, else as longrope with one
        # factor list at every length and no cos/sin factor, which is ggml's arithmetic exactly
        per = [float(x) for x in f.dequantized(freqs.name)]
        rotary = int(rp.get("partial_rotary_factor", 1.0) * d_head)
        rp.update(llama3_from_factors(per, rp["rope_theta"], rotary) or dict(
            rope_type="longrope", short_factor=per, long_factor=per, factor=1.0, attention_factor=1.0,
            original_max_position_embeddings=key(f, "context_length") or 1 << 20))
    long, short = f.tensors.get("rope_factors_long.weight"), f.tensors.get("rope_factors_short.weight")
    if long is not None and short is not None:
        rp.update(rope_type="longrope", long_factor=[float(x) for x in f.dequantized(long.name)],
                  short_factor=[float(x) for x in f.dequantized(short.name)],
                  original_max_position_embeddings=original or key(f, "context_length"))
        attn, top, orig = key(f, "rope.scaling.attn_factor"), key(f, "context_length"), rp["original_max_position_embeddings"]
        if attn is not None and not _is_longrope_default(float(attn), top, orig):  # else transformers' own formula
            rp["attention_factor"] = float(attn)
    return rp


def llama3_from_factors(per: list[float], theta: float, dim: int) -> dict | None:
    """Llama 3.1's (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings) from the
    per-frequency divisors the converter wrote, when they are llama3's and at least two frequencies lie on the
    smooth ramp (the ramp is linear in 1 / wavelength: s = old / ((high - low) wavelen) - low / (high - low),
    which fixes old / (high - low) and low / (high - low); low = 1 is chosen, as every Llama 3 config has).
    None when the factors are not of that form (the caller keeps them as they are)."""
    if len(per) != dim // 2 or len(per) < 3:
        return None
    factor = max(per)
    wavelen = [2 * math.pi / (theta ** (-2 * j / dim)) for j in range(len(per))]
    ramp = [(1 / w, (1 / p - 1 / factor) / (1 - 1 / factor)) for p, w in zip(per, wavelen)
            if factor > 1 and 1 + 1e-6 < p < factor * (1 - 1e-6)]
    if len(ramp) < 2:
        return None
    (x0, s0), (x1, s1) = ramp[0], ramp[-1]
    a = (s1 - s0) / (x1 - x0)  # old / (high - low)
    b = a * x0 - s0  # low / (high - low)
    if not (a > 0 and b > 0):
        return None
    params = dict(rope_type="llama3", factor=factor, low_freq_factor=1.0, high_freq_factor=1.0 + 1.0 / b,
                  original_max_position_embeddings=a / b)
    # the factors are float32: round to the numbers a config holds when those reproduce them as well
    tidy = dict(params, high_freq_factor=round(params["high_freq_factor"], 4),
                original_max_position_embeddings=round(params["original_max_position_embeddings"]))
    for candidate in (tidy, params):
        if all(abs(p - q) <= 1e-5 * p for p, q in zip(per, _llama3_factors(candidate, wavelen))):
            return candidate
    return None


def _llama3_factors(p: dict, wavelen: list[float]) -> list[float]:
    """The divisors llama3 scaling applies per frequency (as the converter computes them)."""
    old, low, high, factor = p["original_max_position_embeddings"], p["low_freq_factor"], p["high_freq_factor"], p["factor"]
    out = []
    for w in wavelen:
        if w < old / high:
            out.append(1.0)
        elif w > old / low:
            out.append(factor)
        else:
            smooth = (old / w - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return out


def _is_longrope_default(attn: float, top, original) -> bool:
    """The converter's attn_factor (stored as float32) is sqrt(1 + ln(scale) / ln(original)): the value
    transformers computes itself from the lengths, which then keeps its float64 digits."""
    if not (isinstance(top, int) and isinstance(original, int) and top > 0 and original > 1):
        return False
    scale = top / original
    default = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0
    return abs(attn - default) <= 1e-6 * default


def consumed_tensors(f: GGUFFile) -> set[str]:
    """Tensors read into the config, not weights the engine multiplies by."""
    return {n for n in ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight") if n in f.tensors}


def gguf_pieces(f: GGUFFile, family: GGUFFamily, cfg: dict, hf_names: list[str]) -> dict[str, Piece]:
    """For each HF tensor an adapter reads: where the GGUF holds it and how to undo the converter's change.
    Names the file does not hold are left out (the loader then names the first missing one)."""
    gguf = gguf_module()
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == f.arch)
    n_layers = int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or 0)
    # the family's own map first; llama's for the dense blocks of a partly sparse MoE file
    maps = [gguf.get_tensor_name_map(arch, n_layers), gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layers)]
    experts = _expert_patterns(family)
    pieces: dict[str, Piece] = {}
    for hf in hf_names:
        piece = _expert_piece(hf, experts) or _mapped_piece(hf, maps)
        if piece is None or piece.gguf_name not in f.tensors:
            continue
        undo = family.undo(hf, cfg)
        shape = None
        if hf.endswith(family.transposed):
            shape = tuple(reversed(f.tensors[piece.gguf_name].shape))
            undo = _then_transpose(undo)
        pieces[hf] = Piece(piece.gguf_name, piece.index, undo, shape)
    return pieces


def _mapped_piece(hf: str, maps) -> Piece | None:
    """The GGUF name of an HF tensor, also without its `transformer.`/`model.` prefix (a base model's save)."""
    for names in maps:
        for candidate in (hf, hf.split(".", 1)[-1]):
            gguf_name = names.get_name(candidate, try_suffixes=(".weight", ".bias"))
            if gguf_name:
                return Piece(gguf_name)
    return None


def _expert_patterns(family: GGUFFamily) -> list[tuple[re.Pattern, str]]:
    """Per-expert HF names -> the stacked GGUF tensor (blk.N.ffn_gate_exps) and the expert index."""
    if family.experts is None:
        return []
    out = []
    for hf, part in zip(family.experts, ("gate", "up", "down")):
        pattern = re.escape(hf).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{e\}", r"(?P<e>\d+)")
        out.append((re.compile(pattern + "$"), "blk.{i}.ffn_" + part + "_exps.weight"))
    return out


def _expert_piece(hf: str, experts: list[tuple[re.Pattern, str]]) -> Piece | None:
    for pattern, stacked in experts:
        m = pattern.match(hf)
        if m:
            return Piece(stacked.format(i=m.group("i")), int(m.group("e")))
    return None


def _then_transpose(undo: Undo | None) -> Undo:
    return (lambda a: undo(a).T) if undo is not None else (lambda a: a.T)


def unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo convert_hf_to_gguf's llama permute of q/k rows (ggml's interleaved rotary pairs): each head's rows
    [r0, r0', r1, r1', ...] (pairs side by side) back to transformers' half-split [r0, r1, ..., r0', r1', ...]."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _first(value):
    """A per-layer list (some files store head counts per layer): its first entry when all agree."""
    if isinstance(value, list):
        if value and all(v == value[0] for v in value):
            return value[0]
        return max(value) if value else None
    return value


def _putter(cfg: dict):
    def put(name: str, value) -> None:
        if value is not None:
            cfg[name] = value
    return put


def layer_flags(f: GGUFFile, name: str) -> list[bool] | None:
    """`{arch}.attention.sliding_window_pattern` as one flag per layer (True = sliding), when it is a list."""
    value = key(f, name)
    return [bool(v) for v in value] if isinstance(value, list) else None


def metadata_snapshot(meta: Mapping, skip: tuple[str, ...] = ("tokenizer.ggml.",)) -> dict:
    """The metadata without the tokenizer's long lists (for hashing and for the trace)."""
    return {k: meta[k] for k in meta if not k.startswith(skip) and not k.startswith("GGUF.")}
