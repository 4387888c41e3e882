"""`kvcalc probe --engine vllm`: vLLM started with dummy weights. Needs vLLM and a CUDA GPU;
elsewhere the probe exits 3 with the reason."""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli import build_app

APP = build_app(["probe"])


def probe(*args: str):
    return CliRunner().invoke(APP, ["probe", *args])


def test_unknown_engine_is_a_usage_error():
    pytest.importorskip("torch")
    result = probe("qwen3-0.6b", "--engine", "sglang")
    assert result.exit_code == 2 and "--engine 'sglang'" in result.stderr


def test_without_vllm_or_gpu_exit_3():
    pytest.importorskip("torch")
    import torch

    if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available():
        pytest.skip("vLLM and a GPU are here: the engine can run")
    result = probe("qwen3-0.6b", "--engine", "vllm", "--gpu-memory-utilization", "0.5")
    assert result.exit_code == 3
    assert "needs vLLM" in result.stderr or "needs a CUDA GPU" in result.stderr


@pytest.mark.gpu
def test_vllm_blocks_for_a_given_pool():
    pytest.importorskip("vllm")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    # Qwen3-0.6B: 28 x 16 x 8 x 256 x 2 B = 1,835,008 B per block; a 1 GiB pool holds
    # 1,073,741,824 // 1,835,008 = 585 blocks (null block included)
    result = probe("qwen3-0.6b", "--engine", "vllm", "--kv-cache-memory", "1GiB", "--max-model-len", "4096",
                   "--format", "json")
    assert result.exit_code == 0, result.stderr + result.stdout
    rows = {m["what"]: m for m in json.loads(result.stdout)["checks"][0]["measurements"]}
    assert rows["num_gpu_blocks"]["measured"] == 585
