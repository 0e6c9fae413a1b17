"""Section 1: the model card, a few aligned lines of facts."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from tracer.render.theme import DIM, PairsLine, caution_lines, heading


def render_model_card(card: dict, number: int = 1, warnings: list[dict] | None = None) -> Group:
    """warnings: the run's (positions past max_position_embeddings), in yellow under the facts."""
    title = f"Model  {card['name']} ({card['family']})"
    what = Table.grid(padding=(0, 1))
    what.add_column(style=DIM, no_wrap=True)
    what.add_column(overflow="fold")
    what.add_row("route", card["route"])
    what.add_row("norm", f"{card['norm']}; {card['residual']} residual")
    what.add_row("positions", card["positions"])
    if card.get("rope_scaling"):
        what.add_row("rope scaling", card["rope_scaling"])
    what.add_row("attention", card["attention"])
    if card.get("head"):
        what.add_row("output", card["head"])
    if card.get("quantization"):
        what.add_row("quantization", card["quantization"])
    enc = card.get("encoder")
    if enc:
        what.add_row("encoder", f"{enc['n_layers']} layers, {enc['n_heads']} heads, d_ff {enc['d_ff']} {enc['mlp']}; "
                                f"{enc['positions']}")
    sizes = [
        ("d_model", str(card["d_model"])), ("decoder layers" if enc else "layers", str(card["n_layers"])), ("heads", str(card["n_heads"])),
        ("kv heads", str(card["n_kv_heads"])), ("d_head", str(card["d_head"])), ("d_ff", f"{card['d_ff']} {card['mlp']}"),
        ("vocab", str(card["vocab"])), ("params", card["params"]),
        ("weights", card["weight_dtype"]), ("compute", str(card["compute_dtype"])),
    ]
    return Group(heading(number, title), what, PairsLine(sizes), *caution_lines(warnings))
