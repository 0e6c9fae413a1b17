"""Per-row decoder inputs of an encoder-decoder model: repeated --decoder-ids / --decoder-text give one decoder
row per prompt (ragged rows padded as the encoder's are); a count that does not match the prompts is an error.

The reference for each row is the same prompt run alone with its own decoder input: padding another row
must not change a real position (float32, atol 1e-5, the engine's batch-invariance tolerance)."""

import numpy as np
import pytest
from typer.testing import CliRunner

import tracer
from conftest import model_dir
from tracer.cli.main import app
from tracer.errors import TracerError
from tracer.trace import Trace

PROMPTS = ["hello there", "good morning to you all"]
ROWS = [[0, 5, 7], [0, 9]]
runner = CliRunner()


@pytest.fixture(scope="module")
def t5():
    return tracer.load_model(model_dir("t5"))


@pytest.mark.parametrize("pad_side", ["right", "left"])
def test_each_row_gets_its_own_decoder_input(t5, pad_side):
    both = t5.run(PROMPTS, decoder_ids=ROWS, pad_side=pad_side)
    ids, mask = both["input.decoder_ids"], both["input.decoder_mask"]
    real = slice(1, 3) if pad_side == "left" else slice(0, 2)  # the short row's real positions
    assert ids[0].tolist() == ROWS[0] and ids[1, real].tolist() == ROWS[1]
    assert mask.tolist() == ([[1, 1, 1], [0, 1, 1]] if pad_side == "left" else [[1, 1, 1], [1, 1, 0]])
    for r, (prompt, row) in enumerate(zip(PROMPTS, ROWS)):
        alone = t5.run(prompt, decoder_ids=row)["logits"][0]  # [dec_pos, vocab]
        got = both["logits"][r] if len(row) == 3 else both["logits"][r, real]
        np.testing.assert_allclose(got, alone, atol=1e-5, rtol=0)


def test_one_decoder_input_still_serves_every_row(t5):
    trace = t5.run(PROMPTS, decoder_ids=[0, 5])
    assert trace["input.decoder_ids"].tolist() == [[0, 5], [0, 5]]


def test_decoder_text_per_row(t5):
    trace = t5.run(PROMPTS, decoder_text=["hallo", "guten morgen"])
    for r, text in enumerate(["hallo", "guten morgen"]):
        alone = t5.run(PROMPTS[r], decoder_text=text)
        n = alone["input.decoder_ids"].shape[1]
        assert trace["input.decoder_ids"][r, :n].tolist() == alone["input.decoder_ids"][0].tolist()


def test_a_count_that_does_not_match_the_prompts_is_an_error(t5):
    with pytest.raises(TracerError, match="`decoder_ids` gives 3 decoder row"):
        t5.run(PROMPTS, decoder_ids=[[0], [0, 5], [0, 9]])
    with pytest.raises(TracerError, match="`decoder_text` gives 3 decoder row"):
        t5.run(PROMPTS, decoder_text=["a", "b", "c"])


def test_the_command_line_repeats_decoder_ids_per_prompt(tmp_path, t5):
    out = tmp_path / "t.safetensors"
    args = ["run", "--model", str(model_dir("t5")), *PROMPTS, "--decoder-ids", "0,5,7", "--decoder-ids", "0,9",
            "--save", str(out), "--only", "top_k"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = Trace.load(out)
    assert saved["input.decoder_ids"].tolist() == [[0, 5, 7], [0, 9, 0]]  # was [[0, 9], [0, 9]]: the last one won
    np.testing.assert_array_equal(saved["logits"], t5.run(PROMPTS, decoder_ids=ROWS)["logits"])


@pytest.mark.parametrize("command", ["run", "capture"])
def test_the_command_line_refuses_a_count_that_does_not_match(command, tmp_path):
    args = [command, "--model", str(model_dir("t5"))] if command == "run" else [command, str(model_dir("t5"))]
    args += [*PROMPTS, "--decoder-ids", "0,5", "--decoder-ids", "0,9", "--decoder-ids", "0"]
    if command == "capture":
        args += ["-o", str(tmp_path / "hf.safetensors")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    words = "prompt(s)" if command == "capture" else "input row(s)"
    assert result.output.splitlines()[0] == f"error: --decoder-ids gives 3 decoder row(s) for 2 {words}"
    assert not (tmp_path / "hf.safetensors").exists()


def test_capture_pads_ragged_decoder_rows_as_the_prompts():
    from tracer.cli.capture_cmd import decoder_inputs

    right = decoder_inputs(model_dir("t5"), ROWS, 2, "right")
    left = decoder_inputs(model_dir("t5"), ROWS, 2, "left")
    assert right.ids.tolist() == [[0, 5, 7], [0, 9, 0]] and right.attention_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert left.ids.tolist() == [[0, 5, 7], [0, 0, 9]] and left.attention_mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    same = decoder_inputs(model_dir("t5"), [[0, 5]], 2, "left")
    assert same.ids.tolist() == [[0, 5], [0, 5]] and same.attention_mask.all()


@pytest.mark.live
def test_capture_gives_each_row_its_decoder_input_as_transformers_runs_it(tmp_path, t5):
    pytest.importorskip("torch")
    out = tmp_path / "hf.safetensors"
    args = ["capture", str(model_dir("t5")), *PROMPTS, "--decoder-ids", "0,5,7", "--decoder-ids", "0,9", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    hf = Trace.load(out)
    assert hf["input.decoder_ids"].tolist() == [[0, 5, 7], [0, 9, 0]]
    ours = t5.run(PROMPTS, decoder_ids=ROWS)
    np.testing.assert_allclose(hf["logits"][0], ours["logits"][0], atol=1e-4, rtol=0)  # float32 eager vs NumPy
    np.testing.assert_allclose(hf["logits"][1, :2], ours["logits"][1, :2], atol=1e-4, rtol=0)
