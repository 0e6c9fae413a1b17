"""`tracer cost` and `tracer run --cost` as rich tables: counts from the config, and measured time per step."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracer.render.theme import DIM, WARN, PairsLine, calm, heading

_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BINARY = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def si(x: float | int | None) -> str:
    """3 significant digits with a decimal prefix: 32018187904 -> 32.0G."""
    if x is None:
        return "-"
    if x == 0:
        return "0"
    for scale, prefix in _SI:
        if abs(x) >= scale:
            return f"{x / scale:.3g}{prefix}"
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def size(n: int | None) -> str:
    """Bytes with a binary prefix: 9437184 -> 9MiB."""
    if n is None:
        return "-"
    for scale, unit in _BINARY:
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n}B"


def _table(*columns: str, caption: str | None = None) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, caption=caption, caption_justify="left", caption_style=DIM)
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right", no_wrap=i > 0, overflow="fold")
    return t


def _model_line(r: dict) -> PairsLine:
    m = r["model"]
    windows = f"{m['windowed_layers']} of {m['n_layers']} layers" if m["windowed_layers"] else "none"
    return PairsLine([
        ("d_model", str(m["d_model"])), ("layers", str(m["n_layers"])), ("heads", str(m["n_heads"])),
        ("kv heads", str(m["n_kv_heads"])), ("d_head", str(m["d_head"])), ("d_ff", f"{m['d_ff']} {m['mlp']}"),
        ("vocab", str(m["vocab"])), ("sliding windows", windows),
        ("batch", str(r["batch"])), ("dtype", f"{r['dtype']} ({r['itemsize']} bytes)"),
    ])


def render_parameters(r: dict, number: int) -> Group:
    p = r["parameters"]
    t = _table("group", "parameters", "share", "bytes")
    for g in p["groups"]:
        note = " (tied: counted in embeddings)" if g["group"] == "head" and p["tied_head"] else ""
        t.add_row(g["group"] + note, f"{g['parameters']:,}", f"{100 * g['share']:.1f}%", size(g["bytes"]))
    t.add_row(Text("total", style="bold"), Text(f"{p['total']:,}", style="bold"), "100%",
              size(p["total"] * r["itemsize"]))
    return Group(heading(number, "Parameters", f"non-embedding (attention, MLP, norms): {p['non_embedding']:,}"), t)


def render_steps(r: dict, number: int) -> Group:
    n = r["steps"]["tokens"]
    t = _table("step", "MACs", "FLOPs", "weights", "written", "decode", "grows",
               caption=f"FLOPs = 2·MACs + elementwise. weights: bytes of weights read; written: bytes of activations "
                       f"written; decode: FLOPs of one decoding step at position {n} with a KV cache.")
    for row in r["steps"]["rows"]:
        grows = Text(row["grows"], style="bold" if row["grows"] == "n²" else DIM)
        t.add_row(row["step"], si(row["macs"]) if row["macs"] else Text("-", style=DIM),
                  si(row["flops"]), size(row["weight_bytes"]), size(row["act_bytes"]), si(row["decode_flops"]), grows)
    layers = r["model"]["n_layers"]
    caption = (f"A prefill of {n} positions × batch {r['batch']}; blocks.{{i}} rows are summed over the {layers} layers. "
               "n² rows grow with the (query, key) pairs the mask keeps.")
    return Group(heading(number, f"Each step at {n} tokens", caption), t)


def render_passes(r: dict, number: int) -> Group:
    a = r["passes"]
    n = a["position"]
    t = _table("pass", "new", "FLOPs", "attn n²", "weights", "KV read", "FLOPs/B",
               caption="new: tokens produced; attn n²: share of the FLOPs in attention's pair terms; weights and "
                       "KV read: bytes read; FLOPs/B: FLOPs per byte read.")
    rows = (("prefill", a["prefill"]), ("decode, KV cache", a["decode_cached"]), ("decode, no cache", a["decode_uncached"]))
    for label, x in rows:
        share = x["attention_pair_flops"] / x["flops"] if x["flops"] else 0.0
        t.add_row(label, str(x["new_tokens"]), si(x["flops"]), f"{100 * share:.1f}%", size(x["weight_bytes"]),
                  size(x.get("kv_cache_read_bytes")), f"{x['flops_per_byte_read']:.3g}")
    caption = (f"Prefill: {n} positions at once. Decoding at position {n}: with a cache, one new query against "
               f"{n + 1} keys; without one, all {n + 1} positions again. Few FLOPs per byte read: memory bound.")
    return Group(heading(number, f"Prefill against one decoding step at position {n}", caption), t)


def render_growth(r: dict, number: int) -> Group:
    t = _table("tokens", "prefill", "per token", "attn n²", "decode", "no cache", "KV cache",
               caption="FLOPs of a prefill, per token, the share in attention's pair terms; of one decoding step at "
                       "that position with a KV cache and without; the KV cache's bytes.")
    beyond = False
    for g in r["growth"]:
        label = Text(str(g["tokens"]))
        if g["beyond_max_positions"]:
            label.append(" *", style=WARN)
            beyond = True
        t.add_row(label, si(g["prefill_flops"]), si(g["prefill_flops_per_token"]), f"{100 * g['attention_share']:.1f}%",
                  si(g["decode_cached_flops"]), si(g["decode_uncached_flops"]), size(g["kv_cache_bytes"]))
    kv = r["kv_cache"]["bytes_per_token"]
    lines = [t, Text(f"KV cache: {size(kv)} per token per sequence ({kv:,} bytes)"
                     + (", windowed layers keep only their last W positions" if r["model"]["windowed_layers"] else ""))]
    if beyond:
        lines.append(Text(f"* beyond the model's {r['model']['max_positions']} positions", style=WARN))
    lines += _crossover_lines(r)
    lines += _rule_lines(r)
    return Group(heading(number, "Growth with the length", "the n² terms take over as the length grows"), *lines)


def _crossover_lines(r: dict) -> list[Text]:
    c = r["crossover"]

    def at(n):
        return f"from {n:,} tokens" if n is not None else "never (sliding windows cap the keys)"

    return [
        Text(f"attention's n² terms overtake the MLP: prefill {at(c['prefill'])} "
             f"(dense square, as eager code computes it: {at(c['prefill_dense'])}); "
             f"one decoding step {'at position ' + format(c['decode'], ',') if c['decode'] is not None else 'never'}"),
    ]


def _rule_lines(r: dict) -> list[Text]:
    x = r["rule_2n"]
    return [Text(
        f"2·N rule at {x['tokens']} tokens, per token: 2·N_non-embedding = {si(x['two_n'])}; counted: "
        f"block matmuls {si(x['block_matmul_flops_per_token'])} + attention n² {si(x['attention_pair_flops_per_token'])} "
        f"+ head {si(x['head_flops_per_token'])} + other elementwise {si(x['other_per_token'])} "
        f"= {si(x['flops_per_token'])}", style=DIM)]


def render_cost(r: dict, name: str) -> Group:
    m = r["model"]
    parts = [heading(1, f"Model  {name} ({m['family']})", "counted from config.json alone; no weights read"),
             _model_line(r), Text()]
    parts += [render_parameters(r, 2), Text(), render_steps(r, 3), Text(), render_passes(r, 4), Text(),
              render_growth(r, 5)]
    return Group(*parts)


# ---------- tracer run --cost ----------

def render_measured(section: dict, number: int) -> Group:
    """Measured time of each step (summed over layers) beside its FLOPs; the slowest marked."""
    if not section["rows"]:
        return Group(heading(number, "Cost"), calm("no step recorded a time"))
    slow = set(section["slowest"])
    t = _table("step", "×", "time", "share", "FLOPs", "GFLOP/s", "")
    for row in section["rows"]:
        mark = Text("◀ slow", style=WARN) if row["step"] in slow else Text("")
        t.add_row(Text(row["step"], style="bold" if row["step"] in slow else ""), str(row["layers"]),
                  f"{1e3 * row['seconds']:.3f} ms", f"{100 * row['time_share']:.1f}%",
                  si(row["flops"]) if row["flops"] is not None else Text("-", style=DIM),
                  f"{row['gflops_per_second']:.3g}" if row["gflops_per_second"] is not None else Text("-", style=DIM),
                  mark)
    caption = (f"Measured time between recorded steps (the recorder's own work excluded), total "
               f"{1e3 * section['total_seconds']:.1f} ms")
    if section["total_flops"]:
        caption += (f" for {si(section['total_flops'])} FLOPs counted as the engine computes them: attention over "
                    "the whole square before the mask")
    caption += f" ({section['note']})." if section.get("note") else "."
    return Group(heading(number, "Cost: time and FLOPs per step", caption), t)
