"""The sentence embedding a checkpoint declares (sentence-transformers' modules.json), and the pooling math."""

import json

import numpy as np
import pytest

from tracer.arch.spec import PoolingSpec
from tracer.arch.pooling import read_pooling
from tracer.engine.heads import pool
from tracer.errors import TracerError

ST = "sentence_transformers.models."


def write(folder, modules, pooling=None):
    (folder / "modules.json").write_text(json.dumps(modules))
    if pooling is not None:
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))


def test_no_modules_json_means_mean_pooling_said_as_default(tmp_path):
    assert read_pooling(tmp_path) == PoolingSpec("mean", False, "default")


@pytest.mark.parametrize("key,mode", [("pooling_mode_cls_token", "cls"), ("pooling_mode_mean_tokens", "mean"),
                                      ("pooling_mode_max_tokens", "max"), ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len")])
def test_mode_and_normalize_are_read(tmp_path, key, mode):
    modules = [{"idx": 0, "path": "", "type": ST + "Transformer"}, {"idx": 1, "path": "1_Pooling", "type": ST + "Pooling"},
               {"idx": 2, "path": "2_Normalize", "type": ST + "Normalize"}]
    write(tmp_path, modules, {key: True})
    assert read_pooling(tmp_path) == PoolingSpec(mode, True, "modules.json")


@pytest.mark.parametrize("given,mode", [("mean", "mean"), ("cls", "cls"), (["max"], "max"),
                                        ("mean_sqrt_len_tokens", "mean_sqrt_len"), ("lasttoken", "lasttoken")])
def test_sentence_transformers_6_layout(tmp_path, given, mode):
    """sentence-transformers 6 writes one `pooling_mode` string and moved its module classes."""
    modules = [{"path": "1_Pooling", "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
               {"path": "2_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"}]
    write(tmp_path, modules, {"embedding_dimension": 4, "pooling_mode": given, "include_prompt": True})
    assert read_pooling(tmp_path) == PoolingSpec(mode, True, "modules.json")


def test_unknown_or_several_modes_are_errors(tmp_path):
    write(tmp_path, [{"path": "1_Pooling", "type": ST + "Pooling"}], {"pooling_mode": ["mean", "max"]})
    with pytest.raises(TracerError, match="exactly one pooling mode"):
        read_pooling(tmp_path)
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "median"}))
    with pytest.raises(TracerError, match="unknown 'median'"):
        read_pooling(tmp_path)


def test_two_modes_or_a_missing_config_are_errors(tmp_path):
    modules = [{"path": "1_Pooling", "type": ST + "Pooling"}]
    write(tmp_path, modules, {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True})
    with pytest.raises(TracerError, match="exactly one pooling mode"):
        read_pooling(tmp_path)
    (tmp_path / "1_Pooling" / "config.json").unlink()
    with pytest.raises(TracerError, match="without a config.json"):
        read_pooling(tmp_path)
    (tmp_path / "modules.json").write_text("{not json")
    with pytest.raises(TracerError, match="not valid JSON"):
        read_pooling(tmp_path)


def test_pool_ignores_padding_and_normalises():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    mean = pool(x, mask, PoolingSpec("mean"))
    np.testing.assert_allclose(mean[1], x[1, :2].mean(0), rtol=1e-6)
    assert pool(x, mask, PoolingSpec("cls"))[1].tolist() == x[1, 0].tolist()
    left = np.array([[1, 1, 1, 1, 1], [0, 0, 0, 1, 1]])
    assert pool(x, left, PoolingSpec("cls"))[1].tolist() == x[1, 3].tolist(), "the first real token"
    assert pool(x, mask, PoolingSpec("lasttoken"))[1].tolist() == x[1, 1].tolist(), "the last real token"
    np.testing.assert_allclose(pool(x, mask, PoolingSpec("weightedmean"))[1], (x[1, 0] + 2 * x[1, 1]) / 3, rtol=1e-6)
    np.testing.assert_array_equal(pool(x, mask, PoolingSpec("max"))[1], x[1, :2].max(0))
    np.testing.assert_allclose(pool(x, mask, PoolingSpec("mean_sqrt_len"))[1], x[1, :2].sum(0) / np.sqrt(2), rtol=1e-6)
    unit = pool(x, mask, PoolingSpec("mean", normalize=True))
    np.testing.assert_allclose(np.linalg.norm(unit, axis=-1), 1.0, rtol=1e-6)
    assert unit.dtype == np.float32
