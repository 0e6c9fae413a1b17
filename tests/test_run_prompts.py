"""What `tracer run` does with several words, switches given values, --target spellings, and written files."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from tracer.cli.main import app
from tracer.cli.prompts import check_prompts
from tracer.errors import TracerError

runner = CliRunner()


def run(*args, columns: int = 80):
    return runner.invoke(app, ["run", *map(str, args)], env={"COLUMNS": str(columns), "NO_COLOR": "1"})


# ---------- batches only when asked ----------


@pytest.mark.parametrize("columns", [80, 150])
def test_unquoted_sentence_is_refused_with_the_quoting(columns):
    r = run("Spring", "is", columns=columns)
    assert r.exit_code == 2 and r.output.startswith("error: ")
    assert 'tracer run "Spring is"' in r.output and "--batch" in r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("word", ["true", "false", "1", "yes"])
def test_a_value_after_a_switch_is_refused(word):
    r = run("春天来", "--lens", word)
    assert r.exit_code == 2
    assert "take no value" in r.output and f"--lens {word}" in r.output


def test_batch_flag_runs_a_padded_batch_and_says_so():
    r = run("春天来", "秋天去", "--batch", "--only", "tokens")
    assert r.exit_code == 0, r.output
    first = r.stdout.splitlines()[0]
    assert first.startswith("2 prompts → padded batch")
    assert "batch row 0 of 2" in r.stdout


def test_several_quoted_sentences_are_a_batch_without_the_flag():
    r = run("Spring is", "Autumn was", "--only", "top_k")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("2 prompts → padded batch")


def test_one_prompt_is_not_announced_as_a_batch():
    r = run("春天来", "--only", "tokens")
    assert r.exit_code == 0 and "padded batch" not in r.stdout


def test_the_rule_in_isolation():
    assert check_prompts(["a b", "c d"], batch=False) == ["a b", "c d"]
    assert check_prompts(["the cat sleeps.", "你好!"], batch=False) == ["the cat sleeps.", "你好!"]  # quoted one by one
    with pytest.raises(TracerError):
        check_prompts(["春天来", "秋天去"], batch=False)  # two single words: quoting or --batch decides
    with pytest.raises(TracerError):
        check_prompts(["a b", "true"], batch=False)  # a switch's value, even next to a sentence
    assert check_prompts(["ab", "cd"], batch=True) == ["ab", "cd"]
    assert check_prompts(["ab"], batch=False) == ["ab"]


# ---------- --target ----------


def test_target_leading_space_variant_is_hinted():
    r = run("Spring is", "--target", "warm", "--only", "top_k")
    assert r.exit_code == 0, r.output
    hint = next(line for line in r.stdout.splitlines() if line.startswith("hint:"))
    target = next(line for line in r.stdout.splitlines() if line.startswith("target "))
    better = int(re.search(r"ranks (\d+)", hint).group(1))
    assert better < int(re.search(r"rank (\d+)", target).group(1))
    assert "leading space" in hint and "--target ' warm'" in r.stdout.replace("\n", " ")


def test_no_hint_when_the_target_is_already_the_best_spelling():
    r = run("Spring is", "--target", " warm", "--only", "top_k")
    assert r.exit_code == 0 and "hint:" not in r.stdout


def test_better_variants_are_in_the_json():
    r = runner.invoke(app, ["run", "Spring is", "--target", "warm", "--json", "--only", "top_k"])
    target = json.loads(r.stdout)["distribution"]["target"]
    assert target["better_variants"] and target["better_variants"][0]["text"] == " warm"
    assert target["better_variants"][0]["rank"] < target["rank"]


@pytest.mark.parametrize("columns", [80, 150])
def test_lens_tracks_the_target_at_every_layer(columns):
    r = run("春天来", "--target", "去", "--lens", "--only", "top_k,lens", columns=columns)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    header = next(line for line in lines if line.startswith("after"))
    assert "p(去)" in header and header.count("rank") == 2
    rows = [line.split() for line in lines if re.match(r"^(embedding|block \d)", line)]
    assert len(rows) == 4
    final_rank = int(re.search(r"rank (\d+)", next(line for line in lines if line.startswith("target"))).group(1))
    assert int(rows[-1][-1]) == final_rank  # the last layer's lens is the model's output


def test_lens_json_has_the_target_rank_per_layer():
    r = runner.invoke(app, ["run", "春天来", "--target", "去", "--lens", "--json"])
    lens = json.loads(r.stdout)["lens"]
    assert lens["target"]["token"] == "去"
    assert all(isinstance(layer["target_rank"], int) and 0 <= layer["target_prob"] <= 1 for layer in lens["layers"])


# ---------- written files and the Trace repr ----------


def test_save_and_export_html_are_confirmed_on_stderr(tmp_path):
    trace, page = tmp_path / "t.safetensors", tmp_path / "t.html"
    r = runner.invoke(app, ["run", "春天来", "--save", str(trace), "--export-html", str(page), "--json"])
    assert r.exit_code == 0, r.output
    json.loads(r.stdout)  # stdout stays pure JSON
    assert re.search(rf"wrote the trace to {re.escape(str(trace))} \(\d+ steps, [\d,]+ bytes\)", r.stderr.replace("\n", ""))
    assert f"wrote the page to {page}" in r.stderr.replace("\n", "")
    assert f"{trace.stat().st_size:,} bytes" in r.stderr.replace("\n", "")


def test_trace_repr_is_short_and_says_what_it_holds():
    import tracer
    from tracer.cli.default_model import default_model_path

    t = tracer.load_model(default_model_path()).run("春天来")
    text = repr(t)
    assert len(text) < 1000 and text.count("\n") <= 10
    assert f"{len(t.steps)} steps" in text and "float32" in text and "KiB" in text and "'春天来'" in text
    assert "probs [batch=1, pos=4, vocab=1280] float32" in text
    assert "array(" not in text


def test_capture_follows_the_same_batch_rule(tmp_path):
    from long_prompts import DEFAULT

    r = runner.invoke(app, ["capture", str(DEFAULT), "Spring", "is", "-o", str(tmp_path / "x.safetensors")])
    assert r.exit_code == 2 and '"Spring is"' in r.output and "--batch" in r.output
    assert not (tmp_path / "x.safetensors").exists()
