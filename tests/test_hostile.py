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


# ----------------------------------------------------------------------------- bounds

HUGE = "9" * 300


@pytest.mark.parametrize("flag", ["MODEL", "--gpu", "--vllm-version", "--dtype", "--kv-dtype", "--attention-backend",
                                  "--quantization", "--tp", "--format", "--units"])
def test_a_runaway_value_is_echoed_by_its_start_and_length(run, flag):
    # a pasted file or a runaway shell variable: the one line names the flag and shows 60 characters of the value
    value = "x" * 5000
    args = [value] if flag == "MODEL" else ["qwen3-0.6b", flag, value]
    code, _, err = run("size", *args)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"'{'x' * 60}...' (5,000 characters)" in err and len(err) < 800
    assert flag in err


@pytest.mark.parametrize(
    "args",
    [
        ["--kv-cache-memory", HUGE], ["--gpu-memory", HUGE], ["--requests", HUGE], ["--requests", f"1,{HUGE}"],
        ["--prompt", HUGE], ["--gen", HUGE, "--prompt", "1"], ["--tokens", HUGE], ["--block-size", HUGE],
        ["--num-gpu-blocks-override", HUGE, "--gpu", "H100-80GB"], ["--max-num-batched-tokens", HUGE, "--gpu", "H100-80GB"],
        ["--max-concurrent-batches", HUGE, "--gpu", "H100-80GB"], ["--gpus-per-node", HUGE], ["--weights-bytes", HUGE],
        ["--kv-cache-memory", "2000000000TiB"], ["--dp", "1000000"], ["--dp", str(10**9)], ["--tp", "8", "--dp", "513"],
        ["--batch", HUGE], ["--max-model-len", HUGE],
    ],
)
def test_huge_values_are_one_line_exit_2(run, args):
    t0 = time.perf_counter()
    code, _, err = run("size", "qwen3-0.6b", *args)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "internal error" not in err
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize(
    "args",
    [
        ["lifecycle", "qwen3-0.6b", "--prompt", "10", "--gen", "5", "--beams", HUGE],
        ["lifecycle", "qwen3-0.6b", "--prompt", "10", "--gen", "5", "--spec-tokens", HUGE],
        ["lifecycle", "qwen3-0.6b", "--prefix-cache", HUGE],
        ["recompute", "qwen3-0.6b", "--prompt", HUGE, "--gen", "3"],
        ["fit", "qwen3-0.6b", "--concurrency", "1", "--gpu", "H100-80GB", "--max-gpus", HUGE],
        ["fit", "qwen3-0.6b", "--concurrency", "1", "--gpu", "H100-80GB", "--max-gpus", "1e350"],
        ["fit", "qwen3-0.6b", "--concurrency", "1", "--gpu", "bogus"],
        ["fit", "qwen3-0.6b", "--concurrency", "1", "--gpu", "H100-80GB", "--max-model-len", "0"],
        ["fit", "qwen3-0.6b", "--concurrency", "1", "--gpu", "H100-80GB", "--kv-dtype", "int3"],
    ],
)
def test_other_commands_bound_their_values(run, args):
    t0 = time.perf_counter()
    code, _, err = run(*args)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "internal error" not in err
    assert time.perf_counter() - t0 < 5


def test_the_largest_world_size_answers_fast(run):
    from kvcalc.app.settings import MAX_WORLD_SIZE

    t0 = time.perf_counter()
    code, out, err = run("size", "qwen3-0.6b", "--dp", str(MAX_WORLD_SIZE), "--gpu", "H100-80GB", "-f", "json")
    assert code == 0, err
    assert json.loads(out)["deployment"]["gpus"] == MAX_WORLD_SIZE
    assert time.perf_counter() - t0 < 3  # about 0.3 s alone; the CI machine is shared


def test_gate_dp_beyond_the_bound_is_a_problem_not_a_hang(run, tmp_path):
    gate = tmp_path / "cap.yaml"
    gate.write_text("- name: big\n  model: qwen3-0.6b\n  dp: 1000000000\n  max_kv_bytes_per_rank: 1GiB\n"
                    "- name: ok\n  model: qwen3-0.6b\n  tokens: 1\n  max_kv_bytes_per_rank: 1GiB\n")
    t0 = time.perf_counter()
    code, out, err = run("gate", str(gate))
    assert code == 2 and "dp" in err and "internal error" not in err
    assert "ok" in out  # the other deployment is still evaluated and shown
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize(
    "line",
    [f"tokens: {HUGE}", f"min_concurrency: {HUGE * 2}", f"gpu_memory_utilization: {HUGE}", f"min_headroom: {HUGE}",
     f"max_kv_bytes_per_rank: {HUGE}", f"gpu_memory: {HUGE}", f"requests: [1, {HUGE}]", f"block_size: {HUGE}",
     f"dp: {HUGE}", f"num_gpu_blocks_override: {HUGE}", "min_concurrency: .inf", f"kv_cache_memory: {HUGE}"],
)
def test_gate_values_of_hundreds_of_digits_are_problems(run, tmp_path, line):
    gate = tmp_path / "cap.yaml"
    gate.write_text(f"- name: a\n  model: qwen3-0.6b\n  gpu: H100-80GB\n  max_bytes_per_token_per_rank: 1GiB\n  {line}\n")
    code, _, err = run("gate", str(gate))
    assert code == 2 and "internal error" not in err and "deployment 'a'" in err, err


@pytest.mark.parametrize("flag", ["--kv-cache-memory", "--tokens", "--blocks", "--pp-rank", "--tp", "--max-model-len"])
def test_probe_bounds_its_options(run, tmp_path, flag):
    log = tmp_path / "vllm.log"
    log.write_text("Available KV cache memory: 2.89 GiB\nGPU KV cache size: 27,056 tokens\n")
    code, _, err = run("probe", "qwen3-0.6b", "--from-vllm-log", str(log), flag, HUGE)
    assert code == 2 and "internal error" not in err and len(err.strip().splitlines()) == 1, err


def test_compare_refuses_a_sweep_beyond_its_rows(run):
    from kvcalc.app.settings import MAX_COMPARE_ROWS

    tokens = ",".join(str(i) for i in range(MAX_COMPARE_ROWS))
    t0 = time.perf_counter()
    code, _, err = run("compare", "qwen3-0.6b", "--tokens", tokens, "--tp", "1,2")
    assert code == 2 and f"at most {MAX_COMPARE_ROWS:,}" in err and time.perf_counter() - t0 < 5
    code, out, _ = run("compare", "qwen3-0.6b", "--tp", f"1,{HUGE}")
    assert code == 0 and "cannot be computed" in out  # a row beyond the bound says why; the others stand


@pytest.mark.parametrize("groups", [[1, 2], "w4a16", 7])
def test_compressed_tensors_groups_must_be_an_object(run, tmp_path, groups):
    # quantization_config.config_groups maps group names to schemes; anything else is refused by name, exit 2
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**QWEN, "quantization_config": {"quant_method": "compressed-tensors", "config_groups": groups}}))
    code, out, err = run("size", str(cfg), "--gpu", "H100-80GB", "--vllm-version", "0.23.0", "--max-model-len", "4096")
    assert code == 2, out + err
    assert "quantization_config.config_groups" in err and "Traceback" not in err
