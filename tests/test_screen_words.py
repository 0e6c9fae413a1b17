"""Words on the screen that were wrong (issue 16): each test reads what a person reads, with NO_COLOR."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from conftest import model_dir
from tracer.cli.main import app

runner = CliRunner()


def invoke(*args, columns=100):
    r = runner.invoke(app, [*map(str, args)], env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    return r.stdout


def test_typed_ids_are_not_said_to_be_added_by_the_tokenizer():
    out = invoke("run", "--ids", "1,2,5", "--only", "tokens")
    assert "added by the tokenizer" not in out
    assert "2 special: </s> <pad>" in out  # ids 1 and 2 of the shipped tokenizer


def test_bert_padding_shows_the_tokenizers_own_pad_piece():
    out = invoke("run", "--model", model_dir("bert"), "a b", "a much longer one", "--only", "tokens")
    pads = [line for line in out.splitlines() if line.rstrip().endswith(" pad")]
    assert pads and all("[PAD]" in line for line in pads) and "<pad>" not in out


def test_roberta_finds_its_mask_after_a_space_and_the_attention_view_reads_from_it():
    # RoBERTa's <mask> has lstrip: its piece is " <mask>" (as in the real tokenizers)
    out = invoke("run", "--model", model_dir("roberta"), "The capital of France is <mask>.")
    assert "Fill in  the mask at position 15" in out
    assert "keys query 15 (<mask>) reads most" in out
    assert re.search(r"^\s*15\s+4\s+<mask>\s+␣<mask>", out, re.M)  # the piece without the space its lstrip took


def test_the_mlm_attention_view_focuses_the_mask_not_the_last_token():
    out = invoke("run", "--model", model_dir("bert-mlm"), "The capital of France is [MASK].", "--only", "attention")
    assert "keys query 17 ([MASK]) reads most" in out


def test_generate_shows_byte_level_tokens_as_run_does():
    out = invoke("generate", "--model", model_dir("gpt2"), "Hello", "-n", "4")
    assert "\ufffd" not in out  # no replacement characters: a partial character reads as its bytes
    run = invoke("run", "--model", model_dir("gpt2"), "--ids", "43,175", "--only", "tokens")
    assert re.search(r"^\s*1\s+175\s+<ef>", run, re.M)  # how tracer run shows id 175
    assert "<ef> (175)" in out  # the same in the generate table
    assert re.search(r"<[0-9a-f]{2}( [0-9a-f]{2})*> \(\d+\)", out)


def test_generated_special_tokens_read_as_their_piece_not_their_id():
    from tracer import load_model
    from tracer.model.generate import Row
    from tracer.render.generate_view import new_text

    tok = load_model(model_dir("t5")).tokenizer
    row = Row(prompt_ids=[5], new_ids=[0, 0], text="")
    assert new_text(row, tok.describe_id).plain == "<pad><pad>"  # the table's name for id 0, not <0>
    gpt2 = load_model(model_dir("gpt2")).tokenizer
    row = Row(prompt_ids=[5], new_ids=[175, 342, 43], text=gpt2.decode([175, 342, 43]))
    assert new_text(row, gpt2.describe_id).plain == "<ef e5 8e>H"


def _section_numbers(out):
    return re.findall(r"^ (\d+[a-z]?) · ", out, re.M)


def test_section_numbers_never_repeat():
    for args in (("--model", model_dir("t5"), "hello there"), ("--model", model_dir("bart"), "hello there"),
                 ("--model", model_dir("bert-mlm"), "The [MASK] of France is [MASK]."), ("The cat",)):
        numbers = _section_numbers(invoke("run", *args))
        assert len(numbers) == len(set(numbers)), (args, numbers)
    numbers = _section_numbers(invoke("run", "--model", model_dir("t5"), "hello there"))
    assert "4a" in numbers and "4b" in numbers  # the self- and cross-attention masks: two panels of section 4


def test_the_pooling_sentence_reads_for_every_mode():
    import io

    from rich.console import Console

    from tracer.render.pooled_view import MODES, render_pooled

    for mode in MODES:
        for normalize in (False, True):
            p = {"mode": mode, "normalize": normalize, "source": "modules.json", "batch_row": 0, "missing": "x"}
            console = Console(file=io.StringIO(), width=400, color_system=None)
            console.print(render_pooled(p))
            caption = console.file.getvalue().splitlines()[1]
            assert caption.count("last layer") == 1, caption
            assert "normalised of" not in caption  # "..., then L2-normalised of the last layer"
            assert caption.endswith("(rule from modules.json). Nothing here is a next token.")
            assert caption.startswith("No head: the model's output is one vector per prompt: the "), caption


def test_one_probability_reads_the_same_twice_in_a_lens_row():
    import io

    from rich.console import Console

    from tracer.render.distribution_view import render_lens

    def row(layer, top_id, p_top, p_final):
        return {"layer": layer, "top": {"token": f"t{top_id}", "special": False}, "top_id": top_id,
                "top_prob": p_top, "final_top_prob": p_final, "final_top_rank": 1 if top_id == 7 else 40}

    lens = {"position": 3, "final_top": {"token": "t7", "id": 7}, "target": None,
            "layers": [row("embed", 2, 0.4, 2.1e-6), row(0, 7, 0.9999998, 0.9999998)]}
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(render_lens(lens))
    [last] = [line for line in console.file.getvalue().splitlines() if line.startswith("block 0")]
    p_top, p_final = re.findall(r"\d\.\d+(?:e[+-]\d+)?", last)[:2]
    assert p_top == p_final  # was 1.000 and 1.0e+00
