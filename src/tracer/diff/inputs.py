"""Did the two runs read the same input? When not, say so first, and compare only what is comparable.

Two traces of different prompts differ at `input.ids` and at every step after
it, which says nothing about the model. In a causal model, though, a position
sees only the tokens up to itself, so the positions where both runs read the
same tokens (the shared prefix, without left padding) are still a fair
comparison. Everything else is refused with the reason.
"""

from __future__ import annotations

import numpy as np

from tracer.errors import TracerError
from tracer.trace import Step, Trace
from tracer.trace.stats import tensor_stats

POSITION_AXES = ("pos", "q_len", "kv_len")


def real_ids(trace: Trace) -> list[list[int]] | None:
    """Per batch row, the ids at real (non-pad) positions; None when the trace has no input.ids."""
    if "input.ids" not in trace or trace.step("input.ids").array is None:
        return None
    ids = np.asarray(trace["input.ids"])
    if ids.ndim == 1:
        ids = ids[None]
    mask = trace["input.mask"] if "input.mask" in trace and trace.step("input.mask").kept else np.ones_like(ids)
    mask = np.asarray(mask).reshape(ids.shape)
    return [[int(i) for i, keep in zip(row, keeps) if keep] for row, keeps in zip(ids, mask)]


def left_padded(trace: Trace) -> bool:
    if "input.mask" not in trace or not trace.step("input.mask").kept:
        return False
    mask = np.asarray(trace["input.mask"])
    return bool(mask.ndim == 2 and (mask[:, 0] == 0).any())


def shared_prefix(a: list[list[int]], b: list[list[int]]) -> int:
    """How many leading positions every row of both runs has in common."""
    if len(a) != len(b):
        return 0
    n = min(min(len(r) for r in a), min(len(r) for r in b))
    for p in range(n):
        if any(ra[p] != rb[p] for ra, rb in zip(a, b)):
            return p
    return n


def describe_input(trace: Trace, ids: list[list[int]]) -> str:
    """`'春天来' (4 tokens: <s> 春 天 来)`, from the trace's own prompts and token table when it has them."""
    from tracer.checkpoint.pieces import shown_piece

    prompts = trace.meta.get("prompts") or []
    tokens = trace.meta.get("tokens") or []
    rows = []
    for b, row in enumerate(ids):
        if b < len(tokens):
            pieces = [shown_piece(t["piece"], t.get("bytes", ""), t.get("special", False)) for t in tokens[b] if not t.get("pad")]
        else:
            pieces = [str(i) for i in row]
        shown = " ".join(pieces[:12]) + (" …" if len(pieces) > 12 else "")
        text = prompts[b] if b < len(prompts) and prompts[b] is not None else None
        head = f"{text!r} " if text is not None else ""
        rows.append(f"{head}({len(row)} tokens: {shown})")
    return "; ".join(rows)


def _token_rows(trace: Trace) -> list[list[dict]]:
    return [[t for t in row if not t.get("pad")] for row in trace.meta.get("tokens") or []]


def _token(t: dict | None, token_id: int | None = None) -> dict | None:
    from tracer.checkpoint.pieces import shown_piece

    if t is None:
        return None if token_id is None else {"id": token_id, "piece": str(token_id), "bytes": "", "special": False}
    return {"id": t["id"], "piece": shown_piece(t["piece"], t.get("bytes", ""), t.get("special", False)),
            "bytes": t.get("bytes", ""), "special": bool(t.get("special"))}


def token_difference(ref: Trace, mine: Trace, a: list[list[int]], b: list[list[int]]) -> dict:
    """Where the two tokenizations part: the first row and position that differ, both tokens (piece and bytes),
    a side-by-side window around it, and the BOS/EOS policy of each side (a special token at either end)."""
    ta, tb = _token_rows(ref), _token_rows(mine)
    row = next((r for r, (ra, rb) in enumerate(zip(a, b)) if ra != rb), 0)
    ra, rb = a[row] if row < len(a) else [], b[row] if row < len(b) else []
    pos = next((p for p, (x, y) in enumerate(zip(ra, rb)) if x != y), min(len(ra), len(rb)))
    ka = ta[row] if row < len(ta) else []
    kb = tb[row] if row < len(tb) else []

    def at(tokens, ids, p):
        if p >= len(ids):
            return None
        return _token(tokens[p] if p < len(tokens) else None, ids[p])

    lo = max(0, pos - 3)
    window = [{"pos": p, "ref": at(ka, ra, p), "mine": at(kb, rb, p)} for p in range(lo, min(max(len(ra), len(rb)), lo + 10))]
    policy = []
    for end, index in (("starts", 0), ("ends", -1)):
        sa = _token(ka[index]) if ka and ka[index].get("special") else None
        sb = _token(kb[index]) if kb and kb[index].get("special") else None
        if (sa and sa["piece"]) != (sb and sb["piece"]):
            word = "BOS" if end == "starts" else "EOS"
            policy.append(f"{word}: A {end} with {sa['piece'] + ' (id ' + str(sa['id']) + ')' if sa else 'no special token'}, "
                          f"B {end} with {sb['piece'] + ' (id ' + str(sb['id']) + ')' if sb else 'no special token'}")
    return {"row": row, "pos": pos, "ref": at(ka, ra, pos), "mine": at(kb, rb, pos), "window": window,
            "policy": policy, "ref_len": len(ra), "mine_len": len(rb)}


def input_difference(ref: Trace, mine: Trace, ref_label: str, mine_label: str, refuse: bool = True) -> dict | None:
    """None when both read the same ids (or one side does not say). Else what each read and what is comparable;
    when nothing is, the error says so, and names the two models when they differ too (refuse=False: returned,
    with the reason under "why")."""
    a, b = real_ids(ref), real_ids(mine)
    if a is None or b is None or a == b:
        return None
    prefix = shared_prefix(a, b)
    causal = (ref.meta.get("model", {}).get("spec", {}).get("causal", True)
              and not any(n.startswith("encoder.") for n in ref.names()))
    comparable = prefix > 0 and causal and not left_padded(ref) and not left_padded(mine) and _named_axes(ref, mine)
    out = {"ref": describe_input(ref, a), "mine": describe_input(mine, b), "shared_prefix": prefix,
           "compared_positions": prefix if comparable else 0, "tokens": token_difference(ref, mine, a, b)}
    if not comparable:
        out["why"] = why = ("they differ from the first token" if prefix == 0 else
               "the model is not causal, so every position depends on the tokens that differ" if not causal else
               "a side is left-padded, so positions do not line up" if left_padded(ref) or left_padded(mine) else
               "a side has no named axes to cut the positions along")
        models = model_difference(ref, mine)
        also = f"; and {models_line(models, ref_label, mine_label)}" if models is not None else ""
        if not refuse:  # two models: different tokenizations are a verdict, said with both sides' tokens
            return out
        first = out["tokens"]
        at = (f" (first at position {first['pos']}: {said_token(first['ref'])} against {said_token(first['mine'])}"
              f"{'; ' + '; '.join(first['policy']) if first['policy'] else ''})")
        raise TracerError(
            f"the inputs differ{at}: {ref_label} ran {out['ref']}, {mine_label} ran {out['mine']}; nothing is comparable: "
            f"{why}{also}",
            hint="diff two runs of the same model on the same input" if models is not None else
                 "diff two runs of the same input; with a checkpoint folder on one side, tracer diff reruns it on the "
                 "other side's input.ids")
    return out


def said_token(t: dict | None, quoted: bool = True) -> str:
    """A token of token_difference as a person reads it: `'he' (id 263, bytes 68 65)`."""
    if t is None:
        return "nothing (the row ended)"
    piece = repr(t["piece"]) if quoted else t["piece"]
    return f"{piece} (id {t['id']}{', bytes ' + t['bytes'] if t['bytes'] and not t['special'] else ''})"


def _named_axes(*traces: Trace) -> bool:
    return all(t.meta.get("format") != "foreign" for t in traces)


def prefix_trace(trace: Trace, n: int) -> Trace:
    """The trace cut to its first n positions along every position axis; steps kept only as statistics
    are dropped (their statistics describe every position)."""
    steps = []
    for s in trace.steps:
        if not s.kept:
            continue
        index = tuple(slice(0, n) if axis in POSITION_AXES else slice(None) for axis in s.axes)
        arr = np.ascontiguousarray(s.array[index]) if len(index) == s.array.ndim else s.array
        steps.append(Step(s.name, s.axes, s.op, s.hf_module, tuple(arr.shape), s.dtype, tensor_stats(arr), arr))
    return Trace(steps, dict(trace.meta))


SIZE_FIELDS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size")


def model_identity(trace: Trace) -> dict | None:
    """What a trace says of its model: name, family, config hash, sizes, parameters; None when it says nothing."""
    model = trace.meta.get("model") or {}
    if not model.get("config_sha256") and not model.get("family"):
        return None
    spec = model.get("spec") or {}
    return {"name": model.get("name"), "family": model.get("family") or spec.get("family"),
            "config_sha256": model.get("config_sha256"), "n_params": model.get("n_params"),
            "sizes": {k: spec[k] for k in SIZE_FIELDS if k in spec}}


def model_difference(ref: Trace, mine: Trace) -> dict | None:
    """None when both traces name the same config (or one does not say); else both models and what differs."""
    a, b = model_identity(ref), model_identity(mine)
    if a is None or b is None or not a["config_sha256"] or not b["config_sha256"]:
        return None
    if a["config_sha256"] == b["config_sha256"]:
        return None
    differs = [k for k in ("family", "n_params") if a[k] != b[k]]
    differs += [k for k in SIZE_FIELDS if a["sizes"].get(k) != b["sizes"].get(k)]
    return {"ref": a, "mine": b, "differs": differs or ["config_sha256"]}


def describe_model(m: dict) -> str:
    """`default-model (llama, 2 layers, d_model 64, 4 heads, vocab 512, config c702dbaa)`."""
    s = m["sizes"]
    parts = [m["family"] or "unknown family"]
    parts += [f"{s['n_layers']} layers"] if "n_layers" in s else []
    parts += [f"{k.replace('n_', '').replace('_size', '')} {s[k]}" for k in ("d_model", "n_heads", "vocab_size") if k in s]
    parts.append(f"config {str(m['config_sha256'])[:8]}")
    return f"{m['name'] or 'a model'} ({', '.join(parts)})"


def models_line(diff: dict, ref_label: str, mine_label: str) -> str:
    return (f"the models differ ({', '.join(diff['differs'])}): {ref_label} is {describe_model(diff['ref'])}, "
            f"{mine_label} is {describe_model(diff['mine'])}")
