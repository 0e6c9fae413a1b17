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
