"""`tracer run` on prompts of 4, 120 and 512 tokens at 80 and 150 columns: short, within the width, and with
labels that are the true absolute positions (read back from the screen and checked against the trace)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

import tracer
from long_prompts import long_model, prompt_for
from tracer.cli.main import app

runner = CliRunner()
SIZES = (4, 120, 512)
WIDTHS = (80, 150)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return long_model(tmp_path_factory.mktemp("long") / "model")


@pytest.fixture(scope="module")
def traces(model):
    m = tracer.load_model(model)
    return {n: m.run(prompt_for(n)) for n in SIZES}


_screens: dict = {}


def screen(model, n: int, columns: int, *args) -> str:
    key = (n, columns, args)
    if key not in _screens:
        result = runner.invoke(app, ["run", prompt_for(n), "--model", str(model), *map(str, args)],
                               env={"COLUMNS": str(columns), "NO_COLOR": "1"})
        assert result.exit_code == 0, result.output
        _screens[key] = result.stdout
    return _screens[key]


def section(out: str, title: str) -> list[str]:
    """The lines of one numbered section, heading excluded."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^ \d+ · {title}", line))
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^ \d+ · ", lines[i])), len(lines))
    return lines[start + 1 : end]


def cells(line: str) -> list[str]:
    """One entry per terminal cell: a wide character fills two (the second is '')."""
    out = []
    for ch in line:
        out.append(ch)
        if cell_len(ch) == 2:
            out.append("")
    return out


def spans(text: str) -> list[int | None]:
    """'0, 504–511' -> [0, None, 504, ..., 511] (None where the screen shows a gap)."""
    out: list[int | None] = []
    for part in text.split(", "):
        lo, _, hi = part.partition("–")
        if out:
            prev = out[-1]
            if prev is not None and int(lo) != prev + 1:
                out.append(None)
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def shown_line(lines: list[str]) -> tuple[list[int | None], list[int | None]]:
    m = next(re.search(r"Shown: queries ([\d, –]+), keys ([\d, –]+) of (\d+)", " ".join(lines)) for _ in [0])
    assert m, "the window names what it shows"
    return spans(m.group(1)), spans(m.group(2))


# ---------- length and width ----------


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("n", SIZES)
def test_default_screen_fits_the_width_and_stays_short(model, n, columns):
    lines = screen(model, n, columns).splitlines()
    assert max(cell_len(line) for line in lines) <= columns
    assert len(lines) <= (155 if columns == 80 else 130), len(lines)


@pytest.mark.parametrize("columns", WIDTHS)
def test_a_long_prompt_adds_only_a_few_lines(model, columns):
    short, long = (len(screen(model, n, columns).splitlines()) for n in (4, 512))
    assert long - short <= 20, (short, long)


# ---------- tokens ----------


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("n", SIZES)
def test_token_table_shows_absolute_positions_and_names_the_gap(model, traces, n, columns):
    lines = section(screen(model, n, columns), "Tokens")
    ids = traces[n]["input.ids"][0]
    rows = [(int(m.group(1)), int(m.group(2))) for line in lines if (m := re.match(r"^\s*(\d+)\s+(\d+)\s", line))]
    positions = [p for p, _ in rows]
    assert positions == sorted(positions) and positions[0] == 0 and positions[-1] == n - 1
    assert all(ids[p] == i for p, i in rows)  # each label is the true position of that id
    gaps = [re.search(r"(\d+) more \((\d+)–(\d+)\)", line) for line in lines if line.strip().startswith("⋮")]
    if n <= 20:
        assert not gaps and len(rows) == n
    else:
        assert len(gaps) == 1 and len(rows) <= 12
        count, lo, hi = map(int, gaps[0].groups())
        assert hi - lo + 1 == count and lo - 1 in positions and hi + 1 in positions
    prompt = [line for line in lines if line.startswith("prompt") or line.startswith("       …")]
    assert 1 <= len(prompt) <= 2


def test_position_moves_the_token_window(model):
    lines = section(screen(model, 512, 80, "--position", 100), "Tokens")
    positions = [int(m.group(1)) for line in lines if (m := re.match(r"^\s*(\d+)\s+\d+\s", line))]
    assert 100 in positions and 511 not in positions


# ---------- mask grid ----------


def read_mask_grid(lines: list[str]) -> tuple[list[int | None], dict[int, list[str]]]:
    """(column indices read from the stacked header, {query: cells}) of the keep grid."""
    first = next(i for i, line in enumerate(lines) if re.match(r"^\s*\d+ \S+\s+■", line))
    start = cells(lines[first]).index("■")
    title = max(i for i in range(first) if lines[i].strip() == "keep")
    header = [cells(line) for line in lines[title + 1 : first]]
    width = len(cells(lines[first])) - start
    cols: list[int | None] = []
    for c in range(start, start + width, 2):
        stacked = "".join(h[c] if c < len(h) else " " for h in header)
        cols.append(None if "⋯" in stacked else int(stacked.replace(" ", "")))
    grid = {}
    for line in lines[first:]:
        m = re.match(r"^\s*(\d+) ", line)
        if not m or "■" not in line:
            continue
        row = cells(line)
        grid[int(m.group(1))] = [row[c] for c in range(start, start + width, 2)]
    return cols, grid


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("n", SIZES)
def test_mask_grid_labels_are_the_true_positions(model, n, columns):
    lines = section(screen(model, n, columns), "Mask")
    cols, grid = read_mask_grid(lines)
    if n > 20:
        rows, keys = shown_line(lines)
        assert cols == keys and sorted(grid) == [q for q in rows if q is not None]
        assert None in cols and cols[-1] == n - 1 and cols[0] == 0
    else:
        assert cols == list(range(n)) and sorted(grid) == list(range(n))
    for q, row in grid.items():  # causal: the cell is kept exactly when key <= query
        for k, cell in zip(cols, row):
            if k is not None:
                assert cell == ("■" if k <= q else "·"), (q, k, cell)


def test_mask_window_follows_position(model):
    lines = section(screen(model, 512, 150, "--position", 200), "Mask")
    rows, keys = shown_line(lines)
    assert 200 in rows and 200 in keys and 511 not in rows


# ---------- attention ----------


def top_entries(line: str) -> list[tuple[int, str, float]]:
    return [(int(k), tok, 1.0 if w == "1.0" else float("0" + w)) for k, tok, w in re.findall(r"(\d+) (\S+) (1\.0|\.\d\d)", line)]


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("n", (120, 512))
def test_all_heads_list_each_heads_strongest_keys(model, traces, n, columns):
    lines = section(screen(model, n, columns), "Attention")
    w = traces[n]["blocks.2.attn.weights"][0, :, n - 1]  # [heads, kv]: what the last token reads
    heads = [line for line in lines if re.match(r"^head \d+", line)]
    assert len(heads) == w.shape[0]
    for line in heads:
        h = int(line.split()[1])
        entries = top_entries(line.split(")", 1)[1])
        assert len(entries) >= 3
        keys = [k for k, _, _ in entries]
        order = np.argsort(-w[h], kind="stable")
        assert all(w[h][k] >= w[h][order[len(keys)]] - 1e-6 for k in keys)  # these are the strongest keys
        assert all(abs(w[h][k] - p) <= 0.0051 for k, _, p in entries)  # with their true weights
        rest = float(line.split()[-1].replace("1.0", "1.00"))
        assert abs(rest - (1.0 - w[h][keys].sum())) <= 0.0051


@pytest.mark.parametrize("n", (120, 512))
def test_one_head_at_150_columns_is_a_window_with_the_rest(model, traces, n):
    lines = section(screen(model, n, 150, "--head", 0), "Attention")
    header = next(line for line in lines if "key →" in line)
    cols = [None if t == "⋯" else int(t) for t in header.split("key →")[1].split()[:-3]]  # drop rest, Σ, row
    rows, keys = shown_line(lines)
    assert cols == keys
    w = traces[n]["blocks.2.attn.weights"][0, 0]
    shown_keys = [k for k in cols if k is not None]
    for line in lines:
        m = re.match(r"^\s*(\d+) \S+\s+(.*)$", line)
        if not m or "✓" not in line:
            continue
        q = int(m.group(1))
        values = m.group(2).split()
        rest = float(values[-3].replace("1.0", "1.00")) if values[-3] != "·" else None
        assert rest is not None and abs(rest - (w[q].sum() - w[q][shown_keys].sum())) <= 0.0051
        grid = values[: len(cols)]
        for k, v in zip(cols, grid):
            if k is not None:
                assert (v == "·") == (k > q), (q, k, v)


@pytest.mark.parametrize("n", (120, 512))
def test_one_head_at_80_columns_lists_each_rows_top_keys(model, traces, n):
    lines = section(screen(model, n, 80, "--head", 0), "Attention")
    w = traces[n]["blocks.2.attn.weights"][0, 0]
    rows = 0
    for line in lines:
        m = re.match(r"^\s*(\d+) \S+\s{2,}(\d.*)$", line)
        if not m:
            continue
        q = int(m.group(1))
        entries = top_entries(m.group(2))
        assert entries and all(k <= q for k, _, _ in entries)  # causal: never a later key
        assert [p for _, _, p in entries] == sorted((p for _, _, p in entries), reverse=True)
        assert all(abs(w[q][k] - p) <= 0.0051 for k, _, p in entries)
        rows += 1
    assert 8 <= rows <= 16


def test_attn_top_asks_for_the_list_on_a_short_prompt(model):
    lines = section(screen(model, 4, 150, "--attn-top", 2), "Attention")
    heads = [line for line in lines if re.match(r"^head \d+", line)]
    assert heads and all(len(top_entries(line.split(")", 1)[1])) <= 2 for line in heads)


# ---------- number formats ----------


@pytest.mark.parametrize("n", SIZES)
def test_next_token_columns_have_one_format_each(model, n):
    lines = section(screen(model, n, 80), "Next token")
    rows = [line.split() for line in lines if re.match(r"^\s*\d+\s{2,}\S", line)]
    assert len(rows) == 10
    logits, probs, cums = [r[3] for r in rows], [r[4] for r in rows], [r[-1] for r in rows]
    assert len({len(x.split(".")[1]) for x in logits}) == 1, logits
    for column in (probs, cums):
        kinds = {"e" in x for x in column}
        assert len(kinds) == 1, column
        if kinds == {False}:
            assert len({len(x) for x in column}) == 1, column
