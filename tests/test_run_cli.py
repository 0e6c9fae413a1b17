"""`tracer run` on screen: the sections appear, the filters filter, tokens are shown as they really are."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from conftest import model_dir
from tracer.cli.main import app

runner = CliRunner()
SECTIONS = ("Model", "Tokens", "Shape flow", "Mask", "Attention", "Next token")


def run(*args, columns: int = 120, **env):
    result = runner.invoke(app, ["run", *map(str, args)], env={"COLUMNS": str(columns), **env})
    assert result.exit_code == 0, result.output
    return result.stdout


def headings(out: str) -> list[str]:
    """Section titles from the numbered rules: ` 3 · Shape flow  ───`."""
    return [m.group(1).strip() for m in re.finditer(r"^ \d+ · (.+?)(?:  |\s*─)", out, re.M)]


@pytest.fixture(scope="module")
def llama():
    return model_dir("llama")


def test_default_shows_the_whole_story_in_order(llama):
    out = run("春天来", "--model", llama)
    titles = headings(out)
    assert [t.split("  ")[0] for t in titles] == list(SECTIONS)
    assert "Logit lens" not in out and "Values" not in out


def test_tokens_show_partial_utf8_bytes_and_the_span_they_cover(llama):
    out = run("春天来", "--model", llama, "--only", "tokens")
    # The fixture's tokenizer cuts 春 (e6 98 a5) into two pieces: <e6 98> and <a5>.
    row1 = next(line for line in out.splitlines() if "<e6 98>" in line)
    assert "春" in row1 and "part 1/2" in row1
    row2 = next(line for line in out.splitlines() if re.match(r"\s*2\s+\d+\s+<a5>", line))
    assert "春" in row2 and "part 2/2" in row2
    bos = next(line for line in out.splitlines() if "<s>" in line and re.match(r"\s*0\s", line))
    assert "special" in bos
    assert "3 UTF-8 bytes" in out


def test_spaces_are_visible_in_pieces(llama):
    out = run("Hello there", "--model", llama, "--only", "tokens")
    assert "␣the" in out


def test_blocks_after_the_first_are_folded_by_default(llama):
    out = run("春天来", "--model", llama, "--only", "steps")
    assert re.search(r"^blocks\.1 ⋯", out, re.M), out
    assert "blocks.1.attn.q" not in out
    assert re.search(r"^  attn\.q\b", out, re.M)  # block 0 in full, names relative to the block label


def test_layers_unfolds_the_chosen_block_and_folds_the_others(llama):
    out = run("春天来", "--model", llama, "--only", "steps", "--layers", "1")
    assert re.search(r"^blocks\.0 ⋯", out, re.M)
    assert re.search(r"^blocks\.1\s*$", out, re.M)
    assert not re.search(r"^blocks\.1 ⋯", out, re.M)


def test_all_unfolds_every_block(llama):
    out = run("春天来", "--model", llama, "--only", "steps", "--all")
    assert "⋯" not in out
    assert len(re.findall(r"^  attn\.scores", out, re.M)) == 2


def test_steps_glob_shows_only_matching_steps_and_focuses_the_screen(llama):
    out = run("春天来", "--model", llama, "--steps", "blocks.1.attn.w*")
    assert "blocks.1.attn.weights" in out
    assert "blocks.0.attn.weights" not in out and "attn.scores" not in out
    assert headings(out) == ["Shape flow"]


def test_shape_flow_shows_grouped_query_repetition_and_named_axes(llama):
    out = run("春天来", "--model", llama, "--only", "steps", columns=160)
    scores = out[out.index("attn.scores") :].splitlines()[:2]
    assert "×2" in scores[0]  # 4 query heads, 2 kv heads: each k head is used twice
    assert "[batch=1, heads=4, q_len=6, kv_len=6]" in "\n".join(scores)
    assert "[batch=1, kv_heads=2, pos=6, d_head=8]" in out


def test_top_k_lists_k_tokens_with_cumulative_probability(llama):
    out = run("春天来", "--model", llama, "--only", "top_k", "--top-k", "3")
    rows = [line for line in out.splitlines() if re.match(r"\s*[123]\s{2,}\S", line)]
    assert len(rows) == 3
    numbers = [re.findall(r"\d+\.\d+(?:e-\d+)?", r) for r in rows]  # logit, prob, cum
    probs = [float(n[-2]) for n in numbers]
    cums = [float(n[-1]) for n in numbers]
    assert probs == sorted(probs, reverse=True)
    assert cums == sorted(cums) and abs(cums[-1] - sum(probs)) < 2e-3


def test_target_reports_rank_and_probability(llama):
    out = run("春天来", "--model", llama, "--only", "top_k", "--target", "天")
    line = next(line for line in out.splitlines() if line.startswith("target"))
    assert re.search(r"rank \d+, prob [\d.e-]+", line)


def test_single_head_rows_are_checked_to_sum_to_one(llama):
    out = run("春天来", "--model", llama, "--only", "attention", "--head", "1", "--layer", "0")
    sums = re.findall(r"(\d\.\d{3}) ([✓✗])", out)
    assert len(sums) == 6  # one per query row
    assert all(mark == "✓" and float(s) == 1.0 for s, mark in sums)


def test_mask_of_a_padded_batch_shows_the_parts_and_flags_empty_rows():
    out = run("春天来", "Hello there, world", "--batch", "--model", model_dir("mistral"), "--only", "mask", columns=200)
    first = out.splitlines()
    titles_line = next(line for line in first if "keep (all combined)" in line)
    assert titles_line.index("causal") < titles_line.index("window") < titles_line.index("padding") < titles_line.index("keep")
    # Sliding window 3 with right padding: pad queries 8..11 see only pads, so they have no key at all.
    flagged = [line for line in first if "⚠ no key" in line]
    assert [int(line.split()[0]) for line in flagged] == [8, 9, 10, 11]


def test_lens_has_one_row_per_residual_stream(llama):
    out = run("春天来", "--model", llama, "--only", "lens", "--lens")
    rows = [line for line in out.splitlines() if re.match(r"^(embedding|block \d+)\s", line)]
    assert [r.split()[0] + (r.split()[1] if r.startswith("block") else "") for r in rows] == ["embedding", "block0", "block1"]


def test_values_show_first_and_last_entries_with_a_gap(llama):
    out = run("春天来", "--model", llama, "--steps", "logits", "--values")
    assert "Values" in out
    header = next(line for line in out.splitlines() if "vocab →" in line)
    assert header.split()[-3:] == ["381", "382", "383"] and "⋯" in header


def test_steps_kept_as_statistics_only_are_said_so_calmly(llama):
    out = run("春天来", "--model", llama, "--keep", "probs", "--lens")
    assert "kept as statistics only" in out
    assert "Next token" in out  # still shown: probs were kept


def test_bad_layer_is_a_clean_error(llama, tmp_path):
    saved = tmp_path / "t.safetensors"
    result = runner.invoke(app, ["run", "春天来", "--model", str(llama), "--layer", "9", "--save", str(saved)])
    assert result.exit_code == 2 and result.output.startswith("error: --layer 9")
    assert not saved.exists()
