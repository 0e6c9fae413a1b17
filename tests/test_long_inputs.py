"""--allow-long: rotary and relative positions past max_position_embeddings, with a warning everywhere a run is
shown; learned position tables refused with or without it; the flag changes the check, never the numbers."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

import tracer
from conftest import FAMILIES, model_dir
from html_tree import parse
from long_prompts import DEFAULT, long_model, prompt_for
from tracer.cli.main import app
from tracer.errors import TracerError
from tracer.model.generate import GenerateOptions, generate
from tracer.model.inputs import LONG_CODE

runner = CliRunner()
LIMIT = 128  # the shipped model's max_position_embeddings
ERROR_300 = ("error: the prompt is 300 tokens; this model allows 128 (max_position_embeddings). Rotary positions can "
             "go further: --allow-long (results past 128 are untrained territory)")
LEARNED = ("gpt2", "opt", "bert", "roberta", "bart")  # position tables: nothing past the last row


def cli(*args, code: int = 0, columns: int = 200, **env):
    result = runner.invoke(app, [*map(str, args)], env={"COLUMNS": str(columns), "NO_COLOR": "1", **env})
    assert result.exit_code == code, result.output
    return result


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def shipped():
    return tracer.load_model(DEFAULT)


@pytest.fixture(scope="module")
def roomy(tmp_path_factory):
    """The shipped model with max_position_embeddings 1024: the same weights, only the number raised."""
    return tracer.load_model(long_model(tmp_path_factory.mktemp("roomy") / "model"))


@pytest.fixture(scope="module")
def long_trace(shipped):
    return shipped.run(prompt_for(300), allow_long=True)


def copy_with(folder, tmp_path, **changes):
    """A checkpoint folder whose config.json has these fields changed (None removes one); the rest linked."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        if f.name != "config.json":
            os.symlink(f, tmp_path / f.name)
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (tmp_path / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return tmp_path


# ---------- the rule, in the Python API ----------


def test_without_the_flag_a_rotary_model_refuses_and_names_the_flag(shipped):
    with pytest.raises(TracerError) as err:
        shipped.run(prompt_for(300))
    # the library names its parameter; the command line says the flag (test_cli_error_line_and_exit_2_without_the_flag)
    assert "error: " + err.value.message == ERROR_300.replace("--allow-long", "`allow_long`")
    shipped.run(prompt_for(LIMIT))  # exactly the limit still runs without it


def test_the_flag_leaves_a_warning_in_the_trace(long_trace):
    (w,) = long_trace.meta["warnings"]
    assert w["code"] == LONG_CODE and w["level"] == "warn"
    assert w["data"] == {"stack": None, "limit": 128, "source": "max_position_embeddings", "positions": "rotary",
                         "first": 128, "last": 299}
    assert w["message"].startswith("positions 128..299 are past max_position_embeddings (128)")
    assert long_trace["logits"].shape[1] == 300


def test_no_warning_within_the_limit(shipped):
    assert "warnings" not in shipped.run(prompt_for(LIMIT), allow_long=True).meta


def test_the_flag_changes_only_the_check_not_the_numbers(long_trace, roomy):
    """Every step past position 128 is what the engine computes when the config allows 1024 positions."""
    wide = roomy.run(prompt_for(300))
    assert "warnings" not in wide.meta
    assert long_trace.names() == wide.names()
    for name in wide.names():
        a, b = long_trace.step(name), wide.step(name)
        assert a.stats == b.stats, name
        if b.array is not None:
            assert a.array is not None and np.array_equal(a.array, b.array), name


@pytest.mark.parametrize("name", LEARNED)
def test_learned_position_tables_are_refused_even_with_the_flag(name):
    m = tracer.load_model(model_dir(name))
    n = m.max_positions
    ids = [[5] * (n + 1)]
    for allow in (False, True):
        with pytest.raises(TracerError) as err:
            m.run(ids=ids, allow_long=allow)
        text = err.value.message
        assert f"holds positions 0..{n - 1} only, so there is no position {n}" in text, text
        assert text.startswith("`allow_long` cannot help") == allow  # the library names its parameter
    m.run(ids=[[5] * n])  # the table's last row is still usable


def test_the_error_says_where_a_reserved_row_table_ends():
    m = tracer.load_model(model_dir("roberta"))  # max_position_embeddings 66: rows 0-1 are reserved
    with pytest.raises(TracerError) as err:
        m.run(ids=[[5] * 65])
    assert "(max_position_embeddings 66, less 2 reserved rows) holds positions 0..63 only" in err.value.message


ROTARY = tuple(f for f in FAMILIES if f not in LEARNED)


@pytest.mark.parametrize("name", ROTARY)
def test_every_rotary_family_goes_past_with_the_flag_and_computes_as_a_larger_config(name, tmp_path):
    m = tracer.load_model(model_dir(name))
    n = m.max_positions
    ids = [[(7 * i) % 50 + 3 for i in range(n + 9)]]
    with pytest.raises(TracerError, match="Rotary positions can go further: `allow_long`"):
        m.run(ids=ids)
    past = m.run(ids=ids, allow_long=True, keep=["logits", "*.attn.weights"])
    assert [w["data"]["first"] for w in past.meta["warnings"]] == [n]
    roomy = tracer.load_model(copy_with(model_dir(name), tmp_path, max_position_embeddings=4 * n))
    assert replace(roomy.spec, extras={}) == replace(m.spec, extras={}), "only the advisory number differs"
    wide = roomy.run(ids=ids, keep=["logits", "*.attn.weights"])
    for step in ("logits", f"blocks.{m.spec.n_layers - 1}.attn.weights"):
        assert np.array_equal(past[step], wide[step]), step


def test_dynamic_rope_needs_no_flag():
    m = tracer.load_model(model_dir("llama-dynamic"))  # max_position_embeddings 8: rescaled past it
    trace = m.run(ids=[[5] * 20])
    assert m.max_positions is None and "warnings" not in trace.meta


# ---------- encoder-decoder: each stack against its own limit ----------


def test_t5_encoder_and_decoder_each_against_their_own_limit(tmp_path):
    m = tracer.load_model(model_dir("t5"))  # no table; its tokenizer says 64
    n = m.position_limit(encoder=True).n
    long_ids = [[5] * (n + 6)]
    with pytest.raises(TracerError) as err:
        m.run(ids=long_ids)
    assert err.value.message.startswith(f"the input is {n + 6} tokens; this model's encoder allows {n} "
                                        "(the tokenizer's model_max_length). Relative positions can go further")
    with pytest.raises(TracerError, match="the decoder input is .* this model's decoder allows"):
        m.run(ids=[[5, 6]], decoder_ids=[0] + [5] * n)
    trace = m.run(ids=long_ids, decoder_ids=[0] + [5] * n, allow_long=True)
    stacks = {w["data"]["stack"]: (w["data"]["first"], w["data"]["last"]) for w in trace.meta["warnings"]}
    assert stacks == {"encoder": (n, n + 5), "decoder": (n, n)}
    assert trace.meta["warnings"][0]["message"].startswith(f"encoder positions {n}..{n + 5} are past the tokenizer's")
    # the same numbers as with a limit that is far away: the relative buckets never read it
    (tmp_path / "roomy").mkdir()
    for f in model_dir("t5").iterdir():
        if f.name != "tokenizer_config.json":
            os.symlink(f, tmp_path / "roomy" / f.name)
    roomy = tracer.load_model(tmp_path / "roomy")
    assert roomy.max_positions is None
    wide = roomy.run(ids=long_ids, decoder_ids=[0] + [5] * n)
    assert np.array_equal(trace["logits"], wide["logits"])
    assert np.array_equal(trace["encoder.final_norm.out"], wide["encoder.final_norm.out"])


def test_bart_encoder_table_is_refused_with_the_flag():
    m = tracer.load_model(model_dir("bart"))
    with pytest.raises(TracerError, match="`allow_long` cannot help: the input is 65 tokens; this model's encoder"):
        m.run(ids=[[5] * 65], allow_long=True)
    with pytest.raises(TracerError, match="this model's decoder allows 64, and its learned position table"):
        m.run(ids=[[5, 6]], decoder_ids=[2] * 65, allow_long=True)


# ---------- generation: prompt + new tokens ----------

GEN = GenerateOptions(12, ignore_eos=True, keep_logits=True)


def test_generation_refuses_to_cross_without_the_flag(shipped):
    with pytest.raises(TracerError) as err:
        generate(shipped, prompt_for(120), options=GEN)
    text = err.value.message
    assert "the prompt takes 120 positions and `max_new_tokens` 12 asks for 12 more" in text
    assert "at most 8 new tokens fit" in text and "`allow_long`" in text


def test_generation_crosses_the_limit_with_the_flag_and_says_at_which_step(shipped, roomy):
    gen = generate(shipped, prompt_for(120), options=replace(GEN, allow_long=True))
    assert len(gen.rows[0].new_ids) == 12
    (w,) = gen.warnings
    assert w["data"]["step"] == 8 and (w["data"]["first"], w["data"]["last"]) == (128, 131)
    assert "crossed max_position_embeddings (128) at step 8" in w["message"]
    assert gen.to_json()["warnings"] == [w]
    # the chosen token of step 8 sits at position 128; from step 9 it is fed at that position
    assert [rs.position for st in gen.steps for rs in st.rows][8:10] == [127, 128]
    same = generate(roomy, prompt_for(120), options=GEN)
    assert same.warnings == [] and same.rows[0].new_ids == gen.rows[0].new_ids
    for a, b in zip(gen.steps, same.steps):
        assert np.array_equal(a.logits, b.logits), a.t


def test_generation_from_a_prompt_already_past_the_limit(shipped):
    gen = generate(shipped, prompt_for(300), options=GenerateOptions(3, ignore_eos=True, allow_long=True, record=True))
    prompt, new = gen.warnings
    assert (prompt["data"]["first"], prompt["data"]["last"]) == (128, 299) and "step" not in prompt["data"]
    assert (new["data"]["first"], new["data"]["last"], new["data"]["step"]) == (300, 302, 0)
    assert gen.trace.meta["warnings"] == gen.warnings


def test_t5_generation_crosses_the_decoders_own_limit():
    m = tracer.load_model(model_dir("t5"))  # relative positions; the tokenizer says 64
    with pytest.raises(TracerError, match="the decoder start token takes 1 position .* this model's decoder allows 64 "
                                          r"\(the tokenizer's model_max_length\): at most 63 new tokens fit. Relative"):
        generate(m, ids=[[5, 6, 7]], options=GenerateOptions(66, ignore_eos=True))
    gen = generate(m, ids=[[5, 6, 7]], options=GenerateOptions(66, ignore_eos=True, allow_long=True))
    (w,) = gen.warnings
    assert (w["data"]["stack"], w["data"]["step"], w["data"]["first"], w["data"]["last"]) == ("decoder", 63, 64, 66)
    assert "new tokens from step 63 on sit at decoder positions 64..66" in w["message"]


def test_generation_with_a_learned_table_is_refused_with_the_flag():
    m = tracer.load_model(model_dir("gpt2"))
    with pytest.raises(TracerError, match="`allow_long` cannot help: .* at most 59 new tokens fit; its learned"):
        generate(m, ids=[[1, 2, 3, 4, 5]], options=GenerateOptions(100, allow_long=True))


# ---------- the command line: error, card, JSON, HTML, trace, report, diff ----------


def test_cli_error_line_and_exit_2_without_the_flag():
    result = cli("run", prompt_for(300), code=2)
    assert result.stderr.strip() == ERROR_300
    result = cli("generate", prompt_for(120), "-n", "12", code=2)
    assert "at most 8 new tokens fit" in result.stderr and "--allow-long" in result.stderr


def test_cli_card_shows_the_warning_in_yellow_and_plain_under_no_color():
    plain = cli("run", prompt_for(300), "--allow-long", "--only", "model,top_k").stdout
    card = plain.split(" 2 · ")[0]
    assert "warning: positions 128..299 are past max_position_embeddings (128): the model was not trained there" in card
    coloured = cli("run", prompt_for(300), "--allow-long", "--only", "model", FORCE_COLOR="1", NO_COLOR=None).stdout
    yellow = coloured.split("\x1b[33m", 1)
    assert len(yellow) == 2 and yellow[1].startswith("warning: positions 128..299"), coloured
    assert "\x1b" not in plain


def test_cli_without_the_card_still_shows_the_warning_first():
    out = cli("run", prompt_for(300), "--allow-long", "--only", "top_k").stdout
    assert out.startswith("warning: positions 128..299")


def test_cli_json_carries_the_warning_and_an_empty_list_otherwise():
    data = json.loads(cli("run", prompt_for(300), "--allow-long", "--json", "--only", "tokens").stdout)
    (w,) = data["warnings"]
    assert w["code"] == LONG_CODE and w["data"]["first"] == 128 and w["data"]["last"] == 299
    assert json.loads(cli("run", "春天来", "--json", "--only", "tokens").stdout)["warnings"] == []


def test_html_card_trace_report_and_diff_show_it(tmp_path):
    t, page, page2 = tmp_path / "t.safetensors", tmp_path / "run.html", tmp_path / "report.html"
    cli("run", prompt_for(300), "--allow-long", "--save", t, "--export-html", page, "--only", "model,top_k")
    for p in (page, page2):
        if p == page2:
            cli("report", t, "-o", page2, "--only", "model,tokens")
        tree, errors = parse(p.read_text(encoding="utf-8"))
        assert not errors
        (card,) = [s for s in tree.find_all("section") if s.attrs.get("data-section") == "model"]
        (warn,) = card.find_all("p", cls="warn")
        assert warn.attrs["data-code"] == LONG_CODE
        assert warn.text().startswith("warning: positions 128..299 are past max_position_embeddings (128)")
    assert tracer.Trace.load(t).meta["warnings"][0]["data"]["last"] == 299
    # a page without the card keeps the warning in its header
    bare = tmp_path / "bare.html"
    cli("report", t, "-o", bare, "--only", "tokens")
    tree, _ = parse(bare.read_text(encoding="utf-8"))
    (header,) = tree.find_all("header")
    assert "warning: positions 128..299" in header.text()

def test_diff_shows_both_sides_warnings(tmp_path):
    t, html = tmp_path / "t.safetensors", tmp_path / "diff.html"
    cli("run", prompt_for(140), "--allow-long", "--save", t, "--only", "model")
    assert "--allow-long" in cli("diff", DEFAULT, t, code=2).stderr  # a folder run on the trace's ids needs it too
    screen = one_line(cli("diff", DEFAULT, t, "--allow-long", "--steps", "logits").stdout)
    assert f"warning (reference, {DEFAULT}): positions 128..139" in screen
    assert f"warning (mine, {t}): positions 128..139" in screen
    data = json.loads(cli("diff", DEFAULT, t, "--allow-long", "--json", "--export-html", html, "--steps", "logits").stdout)
    assert data["verdict"] == "match" and [w["side"] for w in data["warnings"]] == ["reference", "mine"]
    tree, _ = parse(html.read_text(encoding="utf-8"))
    assert [p.text() for p in tree.find_all("p", cls="warn")] == [
        f"warning ({side}): {w['message']}" for side, w in zip(("reference", "mine"), data["warnings"])]


def test_cli_generate_names_the_step_and_stars_the_positions(tmp_path):
    t = tmp_path / "g.safetensors"
    out = one_line(cli("generate", prompt_for(120), "-n", "12", "--ignore-eos", "--allow-long", "--save", t,
                       "--keep", "logits").stdout)
    assert "warning: generation crossed max_position_embeddings (128) at step 8: new tokens from step 8 on sit at " \
           "positions 128..131" in out
    assert "128 *" in out and "127 *" not in out
    assert "* position past max_position_embeddings (128)" in out
    assert tracer.Trace.load(t).meta["warnings"][0]["data"]["step"] == 8
    data = json.loads(cli("generate", prompt_for(120), "-n", "12", "--ignore-eos", "--allow-long", "--json").stdout)
    assert [w["data"]["step"] for w in data["warnings"]] == [8]
    screen = one_line(cli("diff", t, t, "--steps", "logits").stdout)  # a diff of the saved generation shows both sides' warnings
    assert f"warning (reference, {t}): generation crossed" in screen and f"warning (mine, {t}): generation" in screen


@pytest.mark.parametrize("command", ["run", "generate"])
def test_cli_learned_table_refused_with_the_flag(command):
    ids = ",".join(["5"] * 70)
    result = cli(command, "--model", model_dir("gpt2"), "--ids", ids, "--allow-long", code=2)
    first = result.stderr.splitlines()[0]
    assert first.startswith("error: --allow-long cannot help") and "there is no position 64" in first


def test_capture_checks_the_same_rule_before_transformers_runs(tmp_path):
    out = tmp_path / "hf.safetensors"
    assert cli("capture", DEFAULT, prompt_for(300), "-o", out, code=2).stderr.strip() == ERROR_300
    result = cli("capture", model_dir("gpt2"), "--ids", ",".join(["5"] * 70), "-o", out, "--allow-long", code=2)
    assert "there is no position 64" in result.stderr and not out.exists()


def test_cost_footnote_says_what_happens_past_the_limit():
    rotary = one_line(cli("cost", "--tokens", "8,300").stdout)
    assert "* past max_position_embeddings (128): tracer runs these only with --allow-long" in rotary
    table = one_line(cli("cost", "--model", model_dir("gpt2"), "--tokens", "8,100").stdout)
    assert "* past the model's position table of 64 rows: tracer refuses such inputs" in table
    dynamic = json.loads(cli("cost", "--model", model_dir("llama-dynamic"), "--tokens", "8,100", "--json").stdout)
    assert dynamic["model"]["max_positions"] is None and not any(g["beyond_max_positions"] for g in dynamic["growth"])
