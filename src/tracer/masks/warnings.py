"""The mask lab's warnings, ML001-ML013: stable codes, each tied to a porting pitfall (reference §3, §4.5).

Conventions call the `warn_*` / `check_*` helpers while they build; `post_checks` runs on the
finished result for the checks that only need the canonical mask. Levels: "info" is shown but
never fails --strict; "warn" and "error" do.
"""

from __future__ import annotations

import math

import numpy as np

from tracer.engine.masks import positions_from_mask
from tracer.masks.options import MaskOptions
from tracer.masks.result import MaskResult, MaskWarning

CODES = {
    "ML001": "polarity",
    "ML002": "keep-as-additive",
    "ML003": "soft-fill",
    "ML004": "overflow",
    "ML005": "fully-masked",
    "ML006": "axis-misalignment",
    "ML007": "mha-3d-order",
    "ML008": "causal-alignment",
    "ML009": "causal+mask",
    "ML010": "kpm-vs-attn",
    "ML011": "window-semantics",
    "ML012": "left-padding",
    "ML013": "nan/inf",
}

TOP_LEFT_USERS = "torch SDPA is_causal, JAX, Flax, Keras, xformers LowerTriangularMask, FlashAttention 2.0"
BOTTOM_RIGHT_USERS = ("FlashAttention >= 2.1, MLX, xformers ...FromBottomRight, transformers (cache index), "
                      "llama.cpp (positions)")


# ---------- helpers the conventions call ----------


def warn_causal_alignment(b, align: str, offset: int, q_len: int, kv_len: int, level: str = "warn") -> None:
    """ML008: the causal corner matters when Q != K, or when a cache (--past) meets a top-left mask.

    level "info" for conventions whose corner is fixed by an explicit cache offset (transformers, T5):
    nothing is ambiguous there, but a port to a top-left API still needs to know.
    """
    past = b.opts.past
    if q_len == kv_len and not (align == "top-left" and past):
        return
    from tracer.masks.generated import causal_keep

    top_left = causal_keep(q_len, kv_len, 0).astype(np.int8)
    bottom_right = causal_keep(q_len, kv_len, past if past is not None else kv_len - q_len).astype(np.int8)
    if align == "top-left" and past:
        head = f"--past {past} with a top-left causal mask: the cache is ignored and query 0 sees only key 0"
    else:
        head = f"causal mask with Q={q_len} != K={kv_len}: this convention aligns {align} (offset {offset})"
    seen_tl = int(top_left[0].sum())
    seen_br = int(bottom_right[0].sum())
    empty = f"; bottom-right leaves the top {q_len - kv_len} query row(s) with no key" if q_len > kv_len else ""
    b.warn("ML008", f"{head}. Top-left keeps k <= q (query 0 sees {seen_tl} key(s)), bottom-right keeps "
           f"k <= q + {kv_len - q_len} (query 0 sees {seen_br}){empty}. Top-left: {TOP_LEFT_USERS}. "
           f"Bottom-right: {BOTTOM_RIGHT_USERS}",
           level, top_left=top_left, bottom_right=bottom_right, used=align)


def warn_window(b, keys: int | None, left: int | None = None, right: int | None = None, note: str = "") -> None:
    """ML011: name the window in keys including the query, and the same window in each framework's parameter."""
    if keys is None and left is not None and right == 0 and left >= 0:
        keys = left + 1
    if keys is None:
        lr = f"({left},{right})"
        b.warn("ML011", f"window {lr}: keys q-{left}..q+{right} inclusive ({'unbounded' if -1 in (left, right) else left + right + 1} keys). "
               f"FlashAttention window_size={lr}; JAX local_window_size={lr}; xformers "
               f"LocalAttentionFromBottomRightMask{lr}{note}", window_lr=[left, right])
        return
    w = keys
    b.warn("ML011", f"window W={w} keys including the query itself. Same window elsewhere: transformers "
           f"sliding_window={w}; FlashAttention window_size=({w - 1},0) (transformers passes ({w - 1},{w - 1}) with "
           f"causal=True); JAX local_window_size=({w - 1},0); llama.cpp n_swa={w}; xformers make_local_attention({w}); "
           f"mlx_lm window_size={w}; legacy transformers 4.x eager kept W+1={w + 1} keys{note}", window=w)


def warn_causal_plus_mask(b, what: str) -> None:
    """ML009: is_causal and an explicit mask together; each framework resolves it differently."""
    b.warn("ML009", f"--is-causal together with an explicit mask: {what}. Elsewhere: torch SDPA raises on the math "
           f"backend ('Explicit attn_mask should not be set when is_causal=True') and ANDs both on the CPU flash "
           f"kernel; torch MHA's is_causal hint may replace the mask (need_weights=False); Keras and JAX AND them")


def check_keep_as_additive(b, values: np.ndarray, label: str) -> None:
    """ML002: a 0/1 keep-mask handed to an additive convention blocks nothing."""
    v = np.asarray(values, dtype=np.float64)
    finite = v[np.isfinite(v)]
    if finite.size and np.isin(finite, (0.0, 1.0)).all() and (finite == 1.0).any() and np.isfinite(v).all():
        b.warn("ML002", f"{label} only holds 0 and 1 and is ADDED to the scores: it blocks nothing (kept cells get "
               f"+1). If 1 means keep, pass a bool mask or (1 - m) * -inf / finfo.min")


def warn_left_padding(b, mask2d: np.ndarray) -> None:
    """ML012: rows that start with padding shift learned absolute positions; print the position_ids to use."""
    keep = np.asarray(mask2d) != 0
    left = [i for i, row in enumerate(keep) if row.size and not row[0] and row.any()]
    if not left:
        return
    pos_v5 = positions_from_mask(keep)
    pos_v4 = np.where(keep, np.cumsum(keep, axis=-1) - 1, 1)
    rows = ", ".join(f"b={i}: {pos_v5[i].tolist()}" for i in left[:4])
    b.warn("ML012", f"left padding in batch row(s) {left[:8]}: generate() uses position_ids = cumsum(mask) - 1 with "
           f"pads set to 0 (transformers 5; 4.x set them to 1): {rows}. Absolute position embeddings need these; a bare "
           f"forward() uses arange and ignores padding. Use one convention for prefill and decode",
           position_ids_v5=pos_v5, position_ids_v4=pos_v4)


def check_mha_3d_order(b, m3: np.ndarray, n: int, h: int) -> None:
    """ML007: a (N*H, L, S) mask tiled with repeat(H,1,1) instead of repeat_interleave(H, 0)."""
    if n < 2 or h < 2:
        return
    slices = m3.reshape(n * h, -1)
    tiled = all(np.array_equal(slices[i], slices[i + n]) for i in range(n * h - n))
    interleaved = all(np.array_equal(slices[bb * h + hh], slices[bb * h]) for bb in range(n) for hh in range(h))
    if tiled and not interleaved:
        b.warn("ML007", f"the 3-D mask repeats with period N={n} (slice i == slice i+{n}) but is not constant over "
               f"heads within a sample: it looks built with m.repeat({h},1,1). MHA reads slice b*{h}+h, so heads get "
               f"another sample's mask; build it with m.repeat_interleave({h}, dim=0)")


# ---------- checks on the finished result ----------


def post_checks(result: MaskResult, opts: MaskOptions) -> None:
    check_nan_inf(result)
    check_polarity_patterns(result)
    check_soft_fill(result, opts)
    check_fully_masked(result)
    order = {code: i for i, code in enumerate(CODES)}
    result.warnings.sort(key=lambda w: order.get(w.code, 99))


def check_nan_inf(result: MaskResult) -> None:
    info = result.input
    if info.n_nan or info.n_posinf:
        result.warnings.append(MaskWarning(
            "ML013", f"the mask holds {info.n_nan} NaN and {info.n_posinf} +inf value(s): added to the scores they "
            f"make the whole row NaN in every framework ({int(result.nan_rows.sum())} row(s) here)", "error"))


def check_polarity_patterns(result: MaskResult) -> None:
    """ML001: the user's mask keeps exactly the future (strict upper triangle), or blocks the whole diagonal."""
    uk = result.user_keep
    B, H, Q, K = result.score_shape
    if uk is None or Q < 2:
        return
    polarity = result.extra.get("polarity")
    flipped = {"keep": "True=keep here, so this keeps only the FUTURE; MHA/nn.Transformer masks use True=block",
               "block": "True=BLOCK here, so this keeps only the future; SDPA/JAX/HF masks use True=keep"}
    why = flipped.get(polarity, "this keeps only the future")
    futures = {np.triu(np.ones((Q, K), dtype=bool), 1).tobytes(), np.triu(np.ones((Q, K), dtype=bool), K - Q + 1).tobytes()}
    for s in _slices(uk):
        if s.tobytes() in futures:
            result.warnings.append(MaskWarning(
                "ML001", f"the mask looks inverted: it keeps the strict upper triangle (triu(1)); {why}. "
                f"Invert it (~m, or m == 0) if it was meant to be causal"))
            return
    if Q == K:
        for s in _slices(uk):
            if s.any() and not np.diagonal(s).any():
                result.warnings.append(MaskWarning(
                    "ML001", "the mask blocks every query's own key (the whole diagonal) while keeping others: "
                    f"a sign of inverted polarity ({why.split(',')[0]})"))
                return


def _slices(a: np.ndarray):
    seen = set()
    for s in a.reshape(-1, a.shape[-2], a.shape[-1]):
        key = s.tobytes()
        if key not in seen:
            seen.add(key)
            yield s


def soft_fill_limit(opts: MaskOptions) -> float:
    """A fill at or above this warns: -1e4, or -10 x the expected score range when that is larger."""
    return -max(1e4, 10.0 * opts.score_range) if opts.score_range else -1e4


def check_soft_fill(result: MaskResult, opts: MaskOptions) -> None:
    if not result.soft.any():
        return
    fills = np.unique(result.fill[result.soft])
    worst = float(fills.max())
    limit = soft_fill_limit(opts)
    exp_fill = math.exp(worst) if worst > -745 else 0.0
    from tracer.masks.outcomes import soft_row_outcome

    row = soft_row_outcome(worst, result.fill_mode, result.score_dtype)
    shown = ", ".join(f"{f:.4g}" for f in fills[:4])
    if worst >= limit:
        result.warnings.append(MaskWarning(
            "ML003", f"blocked cells use a finite fill ({shown}); exp({worst:.4g}) = {exp_fill:.3g}, so masked keys "
            f"leak once scores reach ~{abs(worst):.3g}, and a fully masked row becomes {row}, not zeros "
            f"(use -inf or finfo.min)", "warn", {"fill": fills, "exp_fill": exp_fill}))
    else:
        result.warnings.append(MaskWarning(
            "ML003", f"blocked cells use a finite fill ({shown}; exp = {exp_fill:.3g}): no leak on partly masked "
            f"rows, but a fully masked row becomes {row}, not zeros", "info", {"fill": fills}))


def check_fully_masked(result: MaskResult) -> None:
    rows = result.fully_masked()
    if not rows:
        return
    from tracer.masks.outcomes import OTHER_BACKENDS

    outcomes = sorted({result.row_outcome(*r) for r in rows})
    where = describe_rows(rows, result.score_shape)
    others = "; ".join(f"{k}: {v}" for k, v in OTHER_BACKENDS.items())
    result.warnings.append(MaskWarning(
        "ML005", f"{len(rows)} fully masked row(s) ({where}): this convention gives {' / '.join(outcomes)} there. "
        f"Elsewhere: {others}", "warn", {"rows": [list(r) for r in rows[:256]], "outcome": outcomes}))


def describe_rows(rows: list[tuple[int, int, int]], shape) -> str:
    """Compact (b,h,q) list: rows that are blocked for every head are shown once as 'b=0 q=0,1 (all heads)'."""
    B, H, Q, K = shape
    by_bq: dict[tuple[int, int], set[int]] = {}
    for bb, hh, qq in rows:
        by_bq.setdefault((bb, qq), set()).add(hh)
    parts = []
    for bb in sorted({k[0] for k in by_bq}):
        all_heads = [qq for (b2, qq), hs in by_bq.items() if b2 == bb and len(hs) == H]
        if all_heads:
            parts.append(f"b={bb} q={_ranges(sorted(all_heads))}" + (" (all heads)" if H > 1 else ""))
        some = [(qq, hs) for (b2, qq), hs in by_bq.items() if b2 == bb and len(hs) != H]
        for qq, hs in sorted(some):
            parts.append(f"b={bb} h={_ranges(sorted(hs))} q={qq}")
    text = "; ".join(parts[:6])
    return text + (f"; +{len(parts) - 6} more" if len(parts) > 6 else "")


def _ranges(values: list[int]) -> str:
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(str(start) if start == v else f"{start}..{v}")
            start = None
    return ",".join(out)
