"""Quantized GGUF files: the weights tracer reads are exactly what `gguf.quants.dequantize` makes of the
stored bytes (ne order reversed, experts sliced, converter changes undone after dequantizing), and a run on a
quantized file is the exact float32 computation over those dequantized weights.

Tolerances: quantized file vs an F32 file holding the dequantized numbers, every step max-abs <= 1e-6 (same
arithmetic); F16/BF16 files vs the folder, each weight within half an ulp of the stored type (2^-11, 2^-8
relative to the stored value), logits NMSE printed and bounded (< 1e-5 F16, < 1e-3 BF16, see the numbers
in the test). Quantized logits vs the unquantized run: the NMSE is printed for the record (llama.cpp's bands),
not demanded: these are random tiny models."""

from __future__ import annotations

import json

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as Q

from gguf_build import FIXTURES, build_gguf, converted_tensors, ARCHS
from test_gguf_checkpoint import IDS, max_step_error
from tracer.checkpoint.gguf import GGUFFile
from tracer.model.model import load_model

WRITABLE = (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.MXFP4)  # gguf.quants.quantize, rows of 32
WIDE_ONLY = (Q.TQ1_0, Q.TQ2_0)  # rows of 256: a wider random model


def nmse(test: np.ndarray, ref: np.ndarray) -> float:
    """llama.cpp's check-nmse.py: mean((test - ref)^2) / var(ref)."""
    return float(np.mean((test - ref) ** 2) / np.var(ref))


def dequantized_copy(tensors: dict[str, np.ndarray], qtype: Q) -> dict[str, np.ndarray]:
    """What the file holds after quantizing, as float32: the reference a quantized run must equal."""
    from gguf_build import quantized

    out = {}
    for name, a in tensors.items():
        data, t = quantized(a, qtype)
        out[name] = a if t == Q.F32 else gguf.quants.dequantize(data, t).reshape(a.shape)
    return out


def same_weights(a, b) -> None:
    for name in a.weights:
        assert np.array_equal(a.weights[name], b.weights[name]), name


@pytest.mark.parametrize("family", ["llama", "qwen2_moe", "gpt2", "gemma2"])
@pytest.mark.parametrize("qtype", WRITABLE, ids=lambda q: q.name)
def test_a_quantized_file_computes_exactly_its_dequantized_weights(family, qtype, tmp_path):
    folder = FIXTURES / family
    cfg = json.loads((folder / "config.json").read_text())
    tensors = converted_tensors(folder, cfg, ARCHS[family])
    quant = load_model(build_gguf(folder, tmp_path / "q.gguf", qtype))
    exact = load_model(build_gguf(folder, tmp_path / "f32.gguf", Q.F32, tensors=dequantized_copy(tensors, qtype)))
    assert quant.files.storage_dtypes().get(qtype.name, 0) > 5  # the matrices really are quantized
    same_weights(quant, exact)
    errors = max_step_error(quant.run(ids=IDS), exact.run(ids=IDS))
    assert max(errors.values()) <= 1e-6
    ref = load_model(folder if family != "gemma2" else build_gguf(folder, tmp_path / "ref.gguf")).run(ids=IDS, keep=["logits"])
    got = quant.run(ids=IDS, keep=["logits"])
    print(f"{family} {qtype.name}: logits NMSE vs unquantized {nmse(got['logits'], ref['logits']):.3g}")


# half an ulp relative to the stored value; F16 also half its smallest subnormal step (2^-25) near zero
@pytest.mark.parametrize("qtype,bound,floor", [(Q.F16, 2.0 ** -11, 2.0 ** -25), (Q.BF16, 2.0 ** -8, 1e-38)],
                         ids=["F16", "BF16"])
@pytest.mark.parametrize("family", ["llama", "gemma", "gpt2"])
def test_f16_and_bf16_files_are_the_folder_within_the_weight_rounding(family, qtype, bound, floor, tmp_path):
    folder = FIXTURES / family
    g, f = load_model(build_gguf(folder, tmp_path / "h.gguf", qtype)), load_model(folder)
    for name in f.weights:
        ours, theirs = g.weights[name], f.weights[name]
        stored = np.abs(theirs) + (1.0 if family == "gemma" and name.endswith(("ln1.w", "ln2.w", "norm.w")) else 0.0)
        assert (np.abs(ours - theirs) <= bound * stored + floor).all(), name
    got, ref = g.run(ids=IDS, keep=["logits"])["logits"], f.run(ids=IDS, keep=["logits"])["logits"]
    err = nmse(got, ref)
    print(f"{family} {qtype.name}: logits NMSE {err:.3g}")
    assert 0 < err < (1e-5 if qtype == Q.F16 else 1e-3)


def random_llama(tmp_path, width: int = 256):
    """A one-block llama whose rows are 256 wide (the ternary types' block), random weights, as converted."""
    rng = np.random.default_rng(7)
    cfg = {"num_hidden_layers": 1, "max_position_embeddings": 64, "hidden_size": width, "intermediate_size": 2 * width,
           "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "vocab_size": 300,
           "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    d, f, kv = width, 2 * width, 2 * width // 4
    shapes = {"token_embd.weight": (300, d), "output.weight": (300, d), "output_norm.weight": (d,),
              "blk.0.attn_norm.weight": (d,), "blk.0.ffn_norm.weight": (d,), "blk.0.attn_q.weight": (d, d),
              "blk.0.attn_k.weight": (kv, d), "blk.0.attn_v.weight": (kv, d), "blk.0.attn_output.weight": (d, d),
              "blk.0.ffn_gate.weight": (f, d), "blk.0.ffn_up.weight": (f, d), "blk.0.ffn_down.weight": (d, f)}
    tensors = {n: (rng.standard_normal(s) * (0.05 if len(s) == 2 else 0.1) + (1.0 if len(s) == 1 else 0.0)).astype(np.float32)
               for n, s in shapes.items()}
    return folder, tensors


@pytest.mark.parametrize("qtype", WIDE_ONLY + (Q.Q8_0,), ids=lambda q: q.name)
def test_ternary_and_wide_files_compute_their_dequantized_weights(qtype, tmp_path):
    folder, tensors = random_llama(tmp_path)
    quant = load_model(build_gguf(folder, tmp_path / "q.gguf", qtype, tensors=tensors))
    exact = load_model(build_gguf(folder, tmp_path / "e.gguf", Q.F32, tensors=dequantized_copy(tensors, qtype)))
    assert quant.files.storage_dtypes()[qtype.name] == 9
    same_weights(quant, exact)
    assert max(max_step_error(quant.run(ids=IDS), exact.run(ids=IDS)).values()) <= 1e-6


DEQUANTIZABLE = [t for t in Q if t.name not in ("Q8_1", "Q8_K", "Q1_0", "I8", "I16", "I32", "I64", "F64")]


@pytest.mark.parametrize("qtype", DEQUANTIZABLE, ids=lambda q: q.name)
def test_every_type_gguf_dequantizes_reads_as_gguf_dequantizes_it(qtype, tmp_path):
    """Random valid blocks of each type (bytes < 0x3c keep every f16 scale finite) in a [3, 2, 512] tensor:
    the whole tensor, one slice of the leading axis (an expert) and an embedding-style row lookup equal
    gguf.quants.dequantize of the same bytes, in NumPy order (ggml ne reversed)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    shape = (3, 2, 512)
    rng = np.random.default_rng(qtype.value)
    if qtype in (Q.F32, Q.F16):
        raw = rng.standard_normal(shape).astype(np.float32 if qtype == Q.F32 else np.float16)
    else:
        raw = rng.integers(0, 0x3C, size=(3, 2, 512 // block * size), dtype=np.uint8)
    w = gguf.GGUFWriter(str(tmp_path / "t.gguf"), "llama")
    w.add_tensor("t", raw, raw_shape=raw.shape, raw_dtype=qtype) if raw.dtype == np.uint8 else w.add_tensor("t", raw)
    w.add_tensor("m", raw[0], raw_shape=raw[0].shape, raw_dtype=qtype) if raw.dtype == np.uint8 else w.add_tensor("m", raw[0])
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    f = GGUFFile(tmp_path / "t.gguf")
    ref = gguf.quants.dequantize(raw, qtype)
    assert f.tensors["t"].shape == shape and f.tensors["t"].qtype == qtype.name
    assert np.array_equal(f.dequantized("t"), ref) and f.dequantized("t").dtype == np.float32
    assert np.array_equal(f.dequantized("t", 2), ref[2])
    rows = np.array([1, 0, 1])
    assert np.array_equal(f.rows("m", rows), ref[0][rows])


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.BF16, Q.F16], ids=lambda q: q.name)
def test_the_fast_dequantizers_are_bit_identical_to_gguf(qtype):
    """tracer's one-pass paths for the common types, on real quantized data over the full value range."""
    from tracer.checkpoint.gguf_dequant import dequantize

    a = (np.random.default_rng(3).standard_normal((3, 64, 96)) * np.geomspace(1e-3, 1e3, 96)).astype(np.float32)
    data = a.astype(np.float16) if qtype == Q.F16 else gguf.quants.quantize(a, qtype)
    ours, theirs = dequantize(data, qtype, gguf), gguf.quants.dequantize(data, qtype)
    assert ours.dtype == np.float32 and ours.shape == a.shape
    assert np.array_equal(ours.view(np.uint32), theirs.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q8_0, Q.F16], ids=lambda q: q.name)
def test_a_large_tensor_dequantized_in_bands_is_the_same(qtype, monkeypatch):
    """Bands of rows (here 3 rows of 256 values per band) give exactly gguf's whole-tensor result."""
    from tracer.checkpoint import gguf_dequant

    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(11)
    if qtype == Q.F16:
        data = rng.standard_normal((2, 10, 256)).astype(np.float16)
    else:
        data = rng.integers(0, 0x3C, size=(2, 10, 256 // block * size), dtype=np.uint8)
    monkeypatch.setattr(gguf_dequant, "BAND_VALUES", 3 * 256)
    assert np.array_equal(gguf_dequant.dequantize(data, qtype, gguf), gguf.quants.dequantize(data, qtype))


def test_nothing_is_dequantized_at_load_and_each_tensor_when_read(tmp_path, monkeypatch):
    """Bounded memory: loading reads headers only; a run dequantizes each matrix when its step reads it (the
    embedding by rows), never the whole model up front."""
    from tracer.checkpoint import gguf as reader

    calls: list[str] = []
    whole, rows = reader.GGUFFile.dequantized, reader.GGUFFile.rows
    monkeypatch.setattr(reader.GGUFFile, "dequantized", lambda self, name, index=None: calls.append(name) or whole(self, name, index))
    monkeypatch.setattr(reader.GGUFFile, "rows", lambda self, name, index: calls.append("rows:" + name) or rows(self, name, index))
    model = load_model(build_gguf(FIXTURES / "llama", tmp_path / "q.gguf", Q.Q8_0))
    assert [c for c in calls if c != "rope_freqs.weight"] == []  # the rope divisors are config, read at load
    calls.clear()
    model.run(ids=IDS, keep=["logits"])
    assert calls.count("rows:token_embd.weight") == 1 and "token_embd.weight" not in calls
    matrices = [n for n, t in model.files.gguf.tensors.items() if t.qtype == "Q8_0" and n != "token_embd.weight"]
    assert sorted(set(calls) - {"rows:token_embd.weight"}) == sorted(set(matrices) | {n for n in calls if "norm" in n})
    assert all(calls.count(n) == 1 for n in matrices)  # each read once per forward
