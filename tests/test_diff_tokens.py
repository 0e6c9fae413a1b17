"""`tracer diff A B TEXT` of two models starts with the tokens: when the two tokenizers split TEXT apart, the two
tokenizations side by side, the first differing token (pieces, ids, bytes), the BOS/EOS policy of each, and the
verdict "the inputs differ" with exit status 1 before any numbers (a GGUF's own tokenizer against the folder's)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gguf_build import FIXTURES, build_gguf
from gguf_vocab import byte_level_fields
from tracer.cli.main import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [*map(str, args)], env={"COLUMNS": "120", "NO_COLOR": "1"})


def _gguf(tmp_path, add_bos: bool):
    fields = byte_level_fields(FIXTURES / "llama" / "tokenizer.json", "default", add_bos=add_bos)
    return build_gguf(FIXTURES / "llama", tmp_path / f"llama-bos{int(add_bos)}.gguf", tokenizer=fields)


def test_a_gguf_without_bos_is_said_with_both_tokenizations_and_exit_1(tmp_path):
    path = _gguf(tmp_path, add_bos=False)
    result = invoke("diff", path, FIXTURES / "llama", "hello world", "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["verdict"] == "inputs differ" and "steps" not in data  # no numbers: the inputs are not the same
    t = data["inputs"]["tokens"]
    assert t["pos"] == 0 and t["mine"]["piece"] == "<s>" and t["mine"]["special"]
    assert t["ref"]["piece"] == "he" and t["ref"]["bytes"] == "68 65"
    assert t["policy"] == ["BOS: A starts with no special token, B starts with <s> (id 0)"]
    assert t["ref_len"] + 1 == t["mine_len"]
    screen = invoke("diff", path, FIXTURES / "llama", "hello world").output
    lines = screen.splitlines()
    assert lines[0] == "≠ THE INPUTS DIFFER" and "first different token: position 0: A he (id 263, bytes 68 65), B <s>" in screen
    row_a = next(ln for ln in lines if ln.strip().startswith("A ") and "he" in ln and "ran" not in ln)
    row_b = next(ln for ln in lines if ln.strip().startswith("B ") and "<s>" in ln and "ran" not in ln)
    assert row_a.split()[1:3] == ["he", "l"] and row_b.split()[1:3] == ["<s>", "he"]
    assert "--same-ids" in screen


def test_same_ids_then_compares_the_computation(tmp_path):
    path = _gguf(tmp_path, add_bos=False)
    result = invoke("diff", path, FIXTURES / "llama", "hello world", "--same-ids", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["first_divergence"] is None


def test_the_same_tokenization_is_not_flagged(tmp_path):
    path = _gguf(tmp_path, add_bos=True)
    result = invoke("diff", path, FIXTURES / "llama", "hello world", "--json")
    assert result.exit_code == 0, result.output
    assert "inputs" not in json.loads(result.stdout)


def test_a_shared_prefix_names_the_first_different_token_too(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    assert invoke("run", "春天来了", "--save", a, "--only", "model").exit_code == 0
    assert invoke("run", "春天去了", "--save", b, "--only", "model").exit_code == 0
    result = invoke("diff", a, b)
    assert result.exit_code == 1
    first = next(ln for ln in result.output.splitlines() if "first different token" in ln)
    assert "position 3: A 来 (id" in first and ", B 去 (id" in first and "bytes e6 9d a5" in first  # 来 is U+6765
    data = json.loads(invoke("diff", a, b, "--json").stdout)
    assert data["inputs"]["compared_positions"] == 3 and data["inputs"]["tokens"]["pos"] == 3


# ---- --tokenizer gguf|json


def _beside(tmp_path, add_bos=False):
    import shutil

    path = _gguf(tmp_path, add_bos=add_bos)
    shutil.copy(FIXTURES / "llama" / "tokenizer.json", tmp_path / "tokenizer.json")
    return path


def test_tokenizer_json_reads_the_tokenizer_beside_the_file(tmp_path):
    path = _beside(tmp_path)
    own = invoke("diff", path, FIXTURES / "llama", "hello world", "--json")
    beside = invoke("diff", path, FIXTURES / "llama", "hello world", "--tokenizer", "json", "--json")
    assert own.exit_code == 1 and json.loads(own.stdout)["verdict"] == "inputs differ"  # the file's: no BOS
    assert beside.exit_code == 0, beside.output
    assert "inputs" not in json.loads(beside.stdout)
    run_gguf = json.loads(invoke("run", "--model", path, "hello world", "--tokenizer", "json", "--json").stdout)
    run_own = json.loads(invoke("run", "--model", path, "hello world", "--json").stdout)
    run_folder = json.loads(invoke("run", "--model", FIXTURES / "llama", "hello world", "--json").stdout)
    ids = lambda r: [t["id"] for t in r["tokens"]]  # noqa: E731
    assert ids(run_gguf) == ids(run_folder) and ids(run_own) == ids(run_folder)[1:]


def test_tokenizer_choice_errors(tmp_path):
    path = _gguf(tmp_path, add_bos=True)
    for args, fragment in (
        (("run", "--model", path, "hi", "--tokenizer", "json"), "no tokenizer.json beside"),
        (("run", "--model", FIXTURES / "llama", "hi", "--tokenizer", "gguf"), "is a checkpoint folder"),
        (("run", "--model", path, "hi", "--tokenizer", "sentencepiece"), "choose gguf"),
        (("generate", "--model", path, "hi", "--tokenizer", "json"), "no tokenizer.json beside"),
    ):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: ") and fragment in result.output.splitlines()[0], result.output
