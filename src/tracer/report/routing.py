"""The routing view of a mixture-of-experts model: per token, which experts it went to and with what
weight, and the load per expert (how many of the row's real tokens each expert served, per layer)."""

from __future__ import annotations

import numpy as np


def moe_layers(trace) -> list[int]:
    """The blocks that recorded a router (MoE layers), in order."""
    layers = []
    for name in trace.names():
        if name.endswith(".mlp.router.experts") and name.startswith("blocks."):
            layers.append(int(name.split(".")[1]))
    return layers


def routing_report(trace, spec: dict, row: int, layer: int, tokens: list[dict]) -> dict | None:
    """None for a model without experts. `layer`: the block whose per-token choices are listed (the
    nearest MoE layer at or before it)."""
    layers = moe_layers(trace)
    moe = spec.get("moe")
    if not layers or not moe:
        return None
    shown = max((i for i in layers if i <= layer), default=layers[0])
    real = [t["pos"] for t in tokens if not t["pad"]]
    out = {"layer": shown, "layers": layers, "n_experts": moe["n_experts"], "top_k": moe["top_k"],
           "normalized": moe.get("normalize", True), "shared": moe.get("d_shared", 0),
           "tokens": [], "load": [], "missing": []}
    try:
        experts = trace[f"blocks.{shown}.mlp.router.experts"][row]  # [pos, top_k]
        weights = trace[f"blocks.{shown}.mlp.router.weights"][row]
        out["tokens"] = [{"pos": p, "token": tokens[p]["token"], "experts": experts[p].tolist(),
                          "weights": [float(w) for w in weights[p]]} for p in real]
        gate_name = f"blocks.{shown}.mlp.shared.gate"  # qwen2_moe: the shared expert's sigmoid gate [batch, pos]
        if gate_name in trace and trace.step(gate_name).array is not None:
            for t in out["tokens"]:
                t["shared_gate"] = float(trace[gate_name][row][t["pos"]])
    except KeyError as e:
        out["missing"].append(str(e).strip("'\""))
    for i in layers:
        try:
            chosen = trace[f"blocks.{i}.mlp.router.experts"][row][real]  # [real, top_k]
        except KeyError:
            continue
        counts = np.bincount(chosen.reshape(-1), minlength=moe["n_experts"])
        out["load"].append({"layer": i, "tokens": counts.tolist()})
    return out
