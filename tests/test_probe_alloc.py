"""`kvcalc probe` check 1 on the CPU: the KV pool of a rank allocated as vLLM 0.33 lays it out
(one int8 buffer of bytes_per_block x num_blocks, per-layer [blocks, kv heads, tokens, K+V]
views), measured by its storage size and the process's resident memory.

Every expected number is derived here from the model's config (the preset's source is the
model's config.json) and the layout rules of vLLM 0.33 (v1/worker/utils.py allocate_kv_cache,
v1/kv_cache_interface.py: page = block_size x kv_heads x (head_size + head_size_v) x dtype
bytes). Blocks from --tokens T are T / block_size + 1 (vLLM's null block).
"""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from kvcalc.cli import build_app

pytest.importorskip("torch")

APP = build_app(["probe"])


def probe(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(APP, ["probe", *args])
    return result.exit_code, result.stdout, result.stderr


def probe_fresh(*args: str) -> tuple[int, str, str]:
    """Run the probe in a new process: the resident-memory delta it measures must not be
    disturbed by what earlier tests left in this one (allocator arenas, thread pools)."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", "kvcalc", "probe", *args], capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def probe_json(*args: str, code: int = 0) -> dict:
    rc, out, err = probe_fresh(*args, "--format", "json")
    assert rc == code, err + out
    return json.loads(out)


def rows(report: dict) -> dict[str, dict]:
    return {m["what"].split(":")[0]: m for m in report["checks"][0]["measurements"]}


def rss_tolerance() -> int:
    """The probe's documented RSS tolerance: two pages (two 2 MiB huge pages when THP is
    'always') plus 256 KiB of interpreter allocations."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
        thp = text[text.index("[") + 1 : text.index("]")]
    except (OSError, ValueError):
        thp = "unknown"
    import os

    page = 2 * 1024 * 1024 if thp == "always" else os.sysconf("SC_PAGE_SIZE")
    return 2 * page + 256 * 1024


def check_cpu(report: dict, backing: int, views: int, shape: list[int], dtype: str) -> None:
    r = rows(report)
    assert report["verdict"] == "agree"
    # the buffer's storage, exactly the predicted bytes
    assert r["backing buffer"]["measured"] == backing
    assert r["backing buffer"]["predicted"] == backing
    # the per-layer views, exactly page x blocks each
    assert r["layer views"]["measured"] == views
    layers = r["layer views"]["details"]["layers"]
    assert all(x["shape"] == shape and x["dtype"] == dtype for x in layers if x["kind"] != "mamba")
    # the layout needs exactly the buffer
    assert r["highest byte a view addresses"]["measured"] == backing
    # resident memory grew by the buffer, within the documented granularity
    if "resident memory delta (RssAnon)" in r:
        rss = r["resident memory delta (RssAnon)"]
        assert abs(rss["measured"] - backing) <= rss_tolerance()
        assert rss["tolerance"] == rss_tolerance()


def test_gqa_llama_two_layers():
    # Llama-3.1-8B: 8 KV heads of 128, bf16. Page = 16 x 8 x (128 + 128) x 2 B = 65,536 B.
    # --tokens 8192 -> 8192 / 16 + 1 = 513 blocks; 2 layers -> 131,072 B per block.
    report = probe_json("llama-3.1-8b", "--device", "cpu", "--layers", "2", "--tokens", "8192")
    page = 16 * 8 * (128 + 128) * 2
    assert page == 65_536
    check_cpu(report, backing=2 * page * 513, views=2 * page * 513, shape=[513, 8, 16, 256], dtype="bfloat16")
    # the whole rank (32 layers) predicted from the probe: 32 x 65,536 x 513
    assert report["checks"][0]["details"]["predicted_rank_bytes"] == 32 * page * 513


def test_mqa_falcon_blocks():
    # Falcon-7B: multi_query -> 1 KV head of 64 (4544 / 71), float16. Page = 16 x 1 x 128 x 2 = 4,096 B.
    report = probe_json("falcon-7b", "--device", "cpu", "--layers", "4", "--blocks", "4096")
    page = 16 * 1 * (64 + 64) * 2
    check_cpu(report, backing=4 * page * 4096, views=4 * page * 4096, shape=[4096, 1, 16, 128], dtype="float16")
    assert 4 * page * 4096 == 64 * 1024 * 1024


def test_mha_phi3():
    # Phi-3-mini: 32 heads = 32 KV heads of 96 (3072 / 32), bf16. Page = 16 x 32 x 192 x 2 = 196,608 B.
    # --tokens 4096 -> 257 blocks.
    report = probe_json("phi-3-mini-4k-instruct", "--device", "cpu", "--layers", "2", "--tokens", "4096")
    page = 16 * 32 * (96 + 96) * 2
    check_cpu(report, backing=2 * page * 257, views=2 * page * 257, shape=[257, 32, 16, 192], dtype="bfloat16")


def test_sliding_gemma3_groups_overlay():
    # Gemma-3-1B: 26 layers, every 6th full, the rest sliding (window 512); 1 KV head of 256, bf16.
    # Page = 16 x 1 x 512 x 2 = 16,384 B for both kinds. vLLM groups 22 sliding + 4 full layers in
    # groups of min(22, 4) = 4 layers (22 >= 1.5 x 4): 6 sliding groups + 1 full group, which overlay
    # one buffer: bytes_per_block = 4 x 16,384 = 65,536. Default --tokens 4096 -> 257 blocks.
    report = probe_json("gemma-3-1b", "--device", "cpu")
    page = 16 * 1 * (256 + 256) * 2
    backing = 4 * page * 257
    views = 26 * page * 257  # every layer's view, aliasing across groups
    check_cpu(report, backing=backing, views=views, shape=[257, 1, 16, 512], dtype="bfloat16")
    layers = rows(report)["layer views"]["details"]["layers"]
    assert sum(1 for x in layers if x["kind"] == "sliding") == 22
    assert len({x["group"] for x in layers}) == 7


def test_mla_deepseek_v2_lite():
    # DeepSeek-V2-Lite: MLA latent kv_lora_rank 512 + qk_rope_head_dim 64 = 576 elements, no V, bf16.
    # Page = 16 x 576 x 2 = 18,432 B. --tokens 4080 -> 255 + 1 = 256 blocks; 3 layers.
    report = probe_json("deepseek-v2-lite", "--device", "cpu", "--layers", "3", "--tokens", "4080")
    page = 16 * (512 + 64) * 2
    check_cpu(report, backing=3 * page * 256, views=3 * page * 256, shape=[256, 1, 16, 576], dtype="bfloat16")


def test_fp8_cache_is_one_byte_uint8():
    # --kv-cache-dtype fp8: vLLM stores uint8, 1 B per element. Page = 16 x 8 x 256 x 1 = 32,768 B.
    report = probe_json("llama-3.1-8b", "--device", "cpu", "--kv-dtype", "fp8", "--layers", "1", "--blocks", "1000")
    check_cpu(report, backing=32_768_000, views=32_768_000, shape=[1000, 8, 16, 256], dtype="uint8")


def test_fp8_inc_is_float8_e4m3fn():
    # fp8_inc maps to torch.float8_e4m3fn in vLLM; same 1 B per element.
    report = probe_json("llama-3.1-8b", "--device", "cpu", "--kv-dtype", "fp8_inc", "--layers", "1", "--blocks", "64")
    check_cpu(report, backing=64 * 32_768, views=64 * 32_768, shape=[64, 8, 16, 256], dtype="float8_e4m3fn")


def test_tp_and_pp_pick_the_rank():
    # Llama-3.1-70B at TP 8 x PP 2: 8 KV heads / 8 = 1 per rank; 80 layers -> 40 per stage.
    # Page = 16 x 1 x 256 x 2 = 8,192 B; the whole rank = 40 x 8,192 = 327,680 B per block.
    report = probe_json("llama-3.1-70b", "--device", "cpu", "--tp", "8", "--pp", "2", "--layers", "4", "--blocks", "100")
    check_cpu(report, backing=4 * 8192 * 100, views=4 * 8192 * 100, shape=[100, 1, 16, 256], dtype="bfloat16")
    assert report["checks"][0]["details"]["rank_bytes_per_block"] == 40 * 8192


def test_table_output_and_exit_zero():
    rc, out, err = probe_fresh("qwen3-0.6b", "--device", "cpu", "--layers", "1", "--blocks", "8")
    assert rc == 0, err
    assert "Pool allocation on cpu: agree" in out and "backing buffer" in out


def test_refuses_more_than_the_host_has():
    # Llama-3.1-405B: 126 layers x 16 x 8 x 256 x 2 B = 8,257,536 B per block; 10^8 tokens is
    # 6,250,001 blocks = 51.6 TB: more than any CI host, refused before allocating.
    rc, out, err = probe("llama-3.1-405b", "--device", "cpu", "--tokens", "100000000")
    assert rc == 3, out
    assert "would allocate" in err and "MemAvailable" in err and "Traceback" not in err


def test_no_cuda_exit_3():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rc, _out, err = probe("qwen3-0.6b", "--device", "cuda", "--blocks", "4")
    assert rc == 3 and "--device cuda" in err


def test_no_torch_exit_3(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    rc, _out, err = probe("qwen3-0.6b", "--device", "cpu", "--blocks", "4")
    assert rc == 3 and "needs torch" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--layers", "99"], "--layers 99"),
        (["--blocks", "4", "--tokens", "64"], "not both"),
        (["--device", "tpu"], "--device 'tpu'"),
        (["--pp-rank", "3"], "--pp-rank 3"),
    ],
)
def test_bad_flags_exit_2(args, needle):
    rc, _out, err = probe("qwen3-0.6b", *args)
    assert rc == 2 and needle in err, err


def test_cuda_allocator_rounding_rules():
    # PyTorch's caching allocator, derived by hand from its constants:
    from kvcalc.probe.alloc import cuda_allocator_prediction

    MiB = 1 << 20
    # 1 B -> one 512 B block in a fresh 2 MiB small-pool segment
    assert cuda_allocator_prediction(1) == (512, 2 * MiB)
    # 3 MiB -> a 20 MiB large segment, rest 17 MiB > 1 MiB: split
    assert cuda_allocator_prediction(3 * MiB) == (3 * MiB, 20 * MiB)
    # 471,597,056 B (Qwen3-0.6B, 28 x 65,536 x 257) -> segment 225 x 2 MiB = 471,859,200;
    # rest 262,144 <= 1 MiB: not split, the whole segment counts as allocated
    assert cuda_allocator_prediction(28 * 65_536 * 257) == (471_859_200, 471_859_200)
    # 12 MiB + 1 B -> 12 MiB + 512 in a 14 MiB segment, rest 2 MiB - 512 > 1 MiB: split
    assert cuda_allocator_prediction(12 * MiB + 1) == (12 * MiB + 512, 14 * MiB)


@pytest.mark.gpu
def test_cuda_qwen3_pool():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    # Qwen3-0.6B: 28 layers x 16 x 8 x 256 x 2 B = 1,835,008 B per block; --tokens 4096 -> 257 blocks
    # = 471,597,056 B. The allocator gives it a 225 x 2 MiB segment and cannot split off the 256 KiB rest.
    report = probe_json("qwen3-0.6b", "--device", "cuda", "--tokens", "4096", "--block-size", "16")
    r = rows(report)
    assert r["backing buffer"]["measured"] == 471_597_056
    assert r["torch.cuda.memory_allocated() delta"]["measured"] == 471_859_200
    assert r["torch.cuda.memory_reserved() delta"]["measured"] == 471_859_200
    assert report["verdict"] == "agree"


@pytest.mark.gpu
def test_cuda_small_buffer():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    # one layer x 4 blocks x 65,536 B = 262,144 B: a small-pool block of exactly that size
    report = probe_json("qwen3-0.6b", "--device", "cuda", "--layers", "1", "--blocks", "4")
    r = rows(report)
    assert r["torch.cuda.memory_allocated() delta"]["measured"] == 262_144
    assert report["verdict"] == "agree"
