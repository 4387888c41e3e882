"""Issue 17, values: hostile configs, flag values and gate values get the right answer or one
line and exit 2; never a wrong answer, exit 70 or an unbounded run (files, writers, Hub: see
tests/test_hostile_io.py)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from kvcalc.errors import ConfigError
from kvcalc.sources.config import spec_from_config
from kvcalc.sources.presets import find

QWEN = find("qwen3-0.6b").load()["config"]  # 28 layers, 16 heads, 8 KV heads, head_dim 128 (hidden 1024)
QWEN_BPT = 2 * 28 * 8 * 128 * 2  # 114,688 B per token


def _spec(**changes):
    return spec_from_config({**QWEN, **changes}, name="x", source="x")


def _bpt(spec) -> int:
    return sum(layer.num_kv_heads * (layer.head_size + layer.head_size_v) * 2 for layer in spec.layers)


# ----------------------------------------------------------------------------- wrong answers


@pytest.mark.parametrize("value", [128, 128.0])
def test_head_dim_integral_float_is_that_integer(value):
    assert _bpt(_spec(head_dim=value)) == QWEN_BPT


@pytest.mark.parametrize("value", ["128", True, 0, -4, 127.5, [128]])
def test_head_dim_invalid_is_refused_not_replaced(value):
    with pytest.raises(ConfigError, match="'head_dim'"):
        _spec(head_dim=value)


def test_gate_cannot_pass_on_a_float_head_dim(run, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**QWEN, "head_dim": 128.0}))
    gate = tmp_path / "cap.yaml"
    gate.write_text(f"- name: q\n  model: {cfg}\n  max_bytes_per_token_per_rank: 100KiB\n")
    code, out, _ = run("gate", str(gate))
    assert code == 1, out  # 114,688 B per token > 100 KiB: the promise fails, as it must


@pytest.mark.parametrize("value,window", [(4096, 4096), (4096.0, 4096), (None, None), (False, None)])
def test_sliding_window_values(value, window):
    spec = _spec(model_type="mistral", sliding_window=value)
    assert {layer.window or None for layer in spec.layers} == {window}


@pytest.mark.parametrize("value", ["4096", 0, -1, 4096.5, True])
def test_sliding_window_invalid_is_refused(value):
    with pytest.raises(ConfigError, match="'sliding_window'"):
        _spec(model_type="mistral", sliding_window=value)


@pytest.mark.parametrize("kv", [32, 7, 3])
def test_kv_heads_must_divide_query_heads(kv):
    with pytest.raises(ConfigError, match="KV heads must divide the 16 attention heads"):
        _spec(num_key_value_heads=kv)


@pytest.mark.parametrize("value", [0, -8, 7.5, "4096", True])
def test_max_position_embeddings_invalid_is_refused(value):
    with pytest.raises(ConfigError, match="maximum length"):
        _spec(max_position_embeddings=value)


def test_max_position_embeddings_integral_float():
    assert _spec(max_position_embeddings=8192.0).max_model_len == 8192


def test_safetensors_negative_shape_is_refused():
    from kvcalc.sources.hub import checkpoint_facts

    def files(shape, dtype="BF16", offsets=(0, 8)):
        return {"a": SimpleNamespace(tensors={"w": SimpleNamespace(dtype=dtype, shape=shape, data_offsets=offsets)})}

    assert checkpoint_facts(files([2, 2]), "x")["bytes"] == 8
    for bad in ([-1000000, 1000], ["2", 2], [True], "22", [10**30, 10**30], [[2]]):
        with pytest.raises(ValueError):
            checkpoint_facts(files(bad), "x")
    for offsets in ((8, 0), (-1, 4), ("0", "8"), (0,)):
        with pytest.raises(ValueError):
            checkpoint_facts(files([2], dtype="X9", offsets=offsets), "x")
    with pytest.raises(ValueError):
        checkpoint_facts(["a"], "x")  # type: ignore[arg-type]


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0
