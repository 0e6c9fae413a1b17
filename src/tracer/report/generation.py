"""A generation trace (tracer generate --save) on the page: the text, each step, and the KV cache as a strip.

The strip has one row per decoding step and one column per cached position: the row is the new query's
attention over the cache at one layer (the mean over heads, from the recorded `attn.weights`), the prompt's
columns are marked, and each step adds one column. Step 0 is the prefill's last row.
"""

from __future__ import annotations

import numpy as np

MAX_STEPS = 64  # strip rows shown (the first ones)


def generation_view(trace, row: int, layer: int, vocab_name, prompt_labels: list[str]) -> dict | None:
    """prompt_labels: the prompt's tokens as the page shows them; vocab_name(id) names the generated ones."""
    gen = trace.meta.get("generation")
    if not gen or row >= len(gen.get("rows") or []):
        return None
    g = gen["rows"][row]
    tokens = trace.meta["tokens"][row]
    prompt_len = len(tokens)
    last = max((t["pos"] for t in tokens if not t.get("pad")), default=prompt_len - 1)
    labels = list(prompt_labels) + [vocab_name(i) for i in g["new_ids"]]
    strip, missing = [], []
    for step in g["steps"][:MAX_STEPS]:
        t = step["t"]
        name = f"blocks.{layer}.attn.weights" if t == 0 else f"decode.{t}.blocks.{layer}.attn.weights"
        if name not in trace or not trace.step(name).kept:
            missing.append(name)
            continue
        w = trace.step(name).array[row]  # [heads, q, cache]
        q = last if t == 0 else 0
        strip.append({"t": t, "name": name, "cache_len": int(w.shape[-1]), "query": prompt_len - 1 + t,
                      "token": step.get("token"), "weights": np.round(w[:, q].astype(np.float64).mean(0), 6).tolist()})
    checked = [s["recompute_max_abs"] for s in g["steps"] if s.get("recompute_max_abs") is not None]
    prompt = (trace.meta.get("prompts") or [None] * (row + 1))[row]
    return {"layer": layer, "prompt_len": prompt_len, "prompt": prompt, "labels": labels, "strip": strip, "missing": missing,
            "steps": g["steps"], "text": g.get("text", ""), "stop": g.get("stop"), "sampling": gen.get("sampling"),
            "check": {"steps": len(checked), "max_abs": max(checked)} if checked else None,
            "more": max(0, len(g["steps"]) - MAX_STEPS)}
