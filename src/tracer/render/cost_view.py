"""`tracer cost` and `tracer run --cost` as rich tables: counts from the config, and measured time per step."""

from __future__ import annotations

from typing import Callable

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
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


Column = tuple[str, Callable[[dict], object], bool]  # header, cell from a row, kept on a narrow terminal


def _table(columns: list[Column], rows: list[dict], caption: str, narrow: bool) -> Table:
    shown = [c for c in columns if c[2] or not narrow]
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, caption=caption, caption_justify="left", caption_style=DIM)
    for i, (header, _, _) in enumerate(shown):
        t.add_column(header, justify="left" if i == 0 else "right", no_wrap=i > 0, overflow="fold")
    for row in rows:
        t.add_row(*(cell(row) for _, cell, _ in shown))
    return t


def fitted(columns: list[Column], rows: list[dict], caption: str, narrow_caption: str) -> "Fitted":
    return Fitted(lambda narrow: _table(columns, rows, narrow_caption if narrow else caption, narrow))


class Fitted:
    """A table laid out for the width it gets: every column when they fit on one line each, else only
    the essential ones (the caption says what the others were)."""

    def __init__(self, build: Callable[[bool], Table]):
        self.build = build  # build(narrow) -> Table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        wide = self.build(False)
        fits = Measurement.get(console, options.update_width(10_000), wide).maximum <= options.max_width
        yield wide if fits else self.build(True)


def _model_line(r: dict) -> PairsLine:
    m = r["model"]
    windows = f"{m['windowed_layers']} of {m['n_layers']} layers" if m["windowed_layers"] else "none"
    layers = str(m["n_layers"]) if m["encoder_layers"] is None else f"{m['encoder_layers']} + {m['n_layers']}"
    return PairsLine([
        ("route", m["route"]), ("d_model", str(m["d_model"])), ("layers", layers), ("heads", str(m["n_heads"])),
        ("kv heads", str(m["n_kv_heads"])), ("d_head", str(m["d_head"])), ("d_ff", f"{m['d_ff']} {m['mlp']}"),
        ("vocab", str(m["vocab"])), ("sliding windows", windows),
        ("batch", str(r["batch"])), ("dtype", f"{r['dtype']} ({r['itemsize']} bytes)"),
    ])


def render_parameters(r: dict, number: int) -> Group:
    p = r["parameters"]
    rows = [{**g, "label": g["group"] + (" (tied: in embeddings)" if g["group"] == "head" and p["tied_head"] else "")}
            for g in p["groups"]]
    rows.append({"label": Text("total", style="bold"), "parameters": p["total"], "share": 1.0,
                 "bytes": p["total"] * r["itemsize"]})
    t = _table([("group", lambda g: g["label"], True), ("parameters", lambda g: f"{g['parameters']:,}", True),
                ("share", lambda g: f"{100 * g['share']:.1f}%", True), ("bytes", lambda g: size(g["bytes"]), True)],
               rows, "", narrow=False)
    return Group(heading(number, "Parameters", f"non-embedding (attention, MLP, norms): {p['non_embedding']:,}"), t)


def _dash_if_zero(x: int) -> Text | str:
    return si(x) if x else Text("-", style=DIM)


def render_steps(r: dict, number: int) -> Group:
    n = r["steps"]["tokens"]
    columns: list[Column] = [
        ("step", lambda x: Text(x["step"], style="bold" if x["grows"] == "n²" else ""), True),
        ("MACs", lambda x: _dash_if_zero(x["macs"]), False),
        ("FLOPs", lambda x: si(x["flops"]), True),
        ("weights", lambda x: size(x["weight_bytes"]), True),
        ("written", lambda x: size(x["act_bytes"]), False),
        ("decode", lambda x: si(x["decode_flops"]), True),
        ("grows", lambda x: Text(x["grows"], style="bold" if x["grows"] == "n²" else DIM), True),
    ]
    caption = (f"FLOPs = 2·MACs + elementwise. weights: bytes of weights read; written: bytes of activations "
               f"written; decode: FLOPs of one decoding step at position {n} with a KV cache.")
    narrow = (f"FLOPs = 2·MACs + elementwise. weights: bytes read; decode: one decoding step at position {n} with "
              "a KV cache. A wider terminal adds MACs and bytes written.")
    m = r["model"]
    layers = f"the {m['n_layers']} layers" if m["encoder_layers"] is None else "their stack's layers"
    intro = (f"A prefill of {n} positions × batch {r['batch']}; blocks.{{i}} rows are summed over {layers}. "
             "n² rows grow with the (query, key) pairs the mask keeps" + ("; n·m rows with decoder × encoder positions."
                                                                          if m["route"] == "encoder-decoder" else "."))
    return Group(heading(number, f"Each step at {n} tokens", intro), fitted(columns, r["steps"]["rows"], caption, narrow))


def render_passes(r: dict, number: int) -> Group:
    a = r["passes"]
    n = a["position"]
    rows = [{"label": label, **a[key]} for label, key in
            (("prefill", "prefill"), ("decode, KV cache", "decode_cached"), ("decode, no cache", "decode_uncached"))
            if a[key] is not None]
    columns: list[Column] = [
        ("pass", lambda x: x["label"], True),
        ("new", lambda x: str(x["new_tokens"]), False),
        ("FLOPs", lambda x: si(x["flops"]), True),
        ("attn n²", lambda x: f"{100 * x['attention_pair_flops'] / x['flops']:.1f}%" if x["flops"] else "-", False),
        ("weights", lambda x: size(x["weight_bytes"]), True),
        ("KV read", lambda x: size(x.get("kv_cache_read_bytes")), True),
        ("FLOPs/B", lambda x: f"{x['flops_per_byte_read']:.3g}" if x["flops_per_byte_read"] is not None else "-", True),
    ]
    caption = ("new: tokens produced; attn n²: share of the FLOPs in attention's pair terms; weights and "
               "KV read: bytes read; FLOPs/B: FLOPs per byte read.")
    narrow = "weights and KV read: bytes read; FLOPs/B: FLOPs per byte read. A wider terminal adds more."
    route = r["model"]["route"]
    if route == "encoder":
        intro = f"An encoder reads all {n} positions at once and does not generate: no decoding step, no cache."
        title = f"One pass over {n} positions"
    else:
        intro = (f"Prefill: {n} positions at once. Decoding at position {n}: with a cache, one new query against "
                 f"{n + 1} keys; without one, all {n + 1} positions again. Few FLOPs per byte read: memory bound.")
        if route == "encoder-decoder":
            intro += (f" Encoder-decoder: the input is {n} positions too; the prefill runs the encoder and the decoder "
                      "over them, a decoding step reads the encoder's keys and values from the cross-attention cache.")
        title = f"Prefill against one decoding step at position {n}"
    return Group(heading(number, title, intro), fitted(columns, rows, caption, narrow))


def render_growth(r: dict, number: int) -> Group:
    def label(g: dict) -> Text:
        return Text(str(g["tokens"])).append(" *" if g["beyond_max_positions"] else "", style=WARN)

    columns: list[Column] = [
        ("tokens", label, True),
        ("prefill", lambda g: si(g["prefill_flops"]), True),
        ("per token", lambda g: si(g["prefill_flops_per_token"]), False),
        ("attn n²", lambda g: f"{100 * g['attention_share']:.1f}%", True),
        ("decode", lambda g: si(g["decode_cached_flops"]), True),
        ("no cache", lambda g: si(g["decode_uncached_flops"]), False),
        ("KV cache", lambda g: size(g["kv_cache_bytes"]), True),
    ]
    caption = ("FLOPs of a prefill, per token, the share in attention's pair terms; of one decoding step at "
               "that position with a KV cache and without; the KV cache's bytes.")
    narrow = ("FLOPs of a prefill, the share in attention's pair terms, of one decoding step with a KV cache; "
              "the cache's bytes. A wider terminal adds more.")
    t = fitted(columns, r["growth"], caption, narrow)
    beyond = any(g["beyond_max_positions"] for g in r["growth"])
    lines: list = [t]
    if r["kv_cache"] is not None:
        kv = r["kv_cache"]["bytes_per_token"]
        cross = " (self-attention and the encoder's, for cross-attention)" if r["model"]["route"] == "encoder-decoder" else ""
        lines.append(Text(f"KV cache: {size(kv)} per token per sequence{cross} ({kv:,} bytes)"
                          + (", windowed layers keep only their last W positions" if r["model"]["windowed_layers"] else "")))
    if beyond:
        n = r["model"]["max_positions"]
        lines.append(Text(f"* past the model's position table of {n} rows: tracer refuses such inputs"
                          if r["model"].get("past_max_positions") == "refused" else
                          f"* past max_position_embeddings ({n}): tracer runs these only with --allow-long, "
                          "and the model was not trained there", style=WARN))
    lines += _crossover_lines(r)
    lines += _rule_lines(r)
    return Group(heading(number, "Growth with the length", "the n² terms take over as the length grows"), *lines)


def _crossover_lines(r: dict) -> list[Text]:
    c = r["crossover"]

    def at(n):
        return f"from {n:,} tokens" if n is not None else "never (sliding windows cap the keys)"

    text = (f"attention's n² terms overtake the MLP: prefill {at(c['prefill'])} "
            f"(dense square, as eager code computes it: {at(c['prefill_dense'])})")
    if r["model"]["route"] != "encoder":
        text += f"; one decoding step {'at position ' + format(c['decode'], ',') if c['decode'] is not None else 'never'}"
    return [Text(text)]


def _rule_lines(r: dict) -> list[Text]:
    x = r["rule_2n"]
    if x is None:  # encoder-decoder: each token passes through one of the two stacks
        return []
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

    def dash(x, fmt):
        return Text("-", style=DIM) if x is None else fmt(x)

    columns: list[Column] = [
        ("step", lambda x: Text(x["step"], style="bold" if x["step"] in slow else ""), True),
        ("×", lambda x: str(x["layers"]), False),
        ("time", lambda x: f"{1e3 * x['seconds']:.3f} ms", True),
        ("share", lambda x: f"{100 * x['time_share']:.1f}%", True),
        ("FLOPs", lambda x: dash(x["flops"], si), True),
        ("GFLOP/s", lambda x: dash(x["gflops_per_second"], lambda v: f"{v:.3g}"), False),
        ("", lambda x: Text("◀ slow", style=WARN) if x["step"] in slow else Text(""), True),
    ]
    caption = (f"Measured time between recorded steps (the recorder's own work excluded), total "
               f"{1e3 * section['total_seconds']:.1f} ms")
    if section["total_flops"]:
        caption += (f" for {si(section['total_flops'])} FLOPs counted as the engine computes them: attention over "
                    "the whole square before the mask")
    caption += f" ({section['note']})." if section.get("note") else "."
    return Group(heading(number, "Cost: time and FLOPs per step", caption), fitted(columns, section["rows"], "", ""))
