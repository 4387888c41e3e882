"""The cold torch.compile inside vLLM's profile run (docs/vllm-budget.md 2.3.6): Inductor's compile-time
autotuning allocates random example tensors of the embedding kernel's arguments, the whole embedding table of
the rank among them, and that becomes the torch peak when it is above the forward and the dummy sampler.
Checked against a real allocator trace and two real logs; --compile-cache warm, --enforce-eager and the
release lines without the mechanism remove it. Model runner V2's state charged by the free-memory delta of
0.27+ is checked here too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.app.budget_check import predict
from kvcalc.app.settings import Settings
from kvcalc.cli import build_app
from kvcalc.core.budget_rules import Shapes, compile_examples
from kvcalc.core.vllm_rules import rules_for
from kvcalc.errors import PlanError
from kvcalc.probe.budget_log import parse_budget
from kvcalc.sources.resolve import resolve

DATA = Path(__file__).parent / "data" / "vllm-budget"
GIB = 1 << 30


def test_the_traced_peak_is_the_embedding_kernels_autotune_examples() -> None:
    # mondegreens/apron's allocator trace of vLLM 0.29.0's profile run, gemma-4-31B-it (language model only,
    # hidden 5376, vocab 262144, bf16) on an H100, 8192 batched tokens, a fresh VLLM_CACHE_ROOT: the blocks live
    # at the torch peak are allocated by Inductor's generate_example_value under generate_and_run_autotune_block
    probe = json.loads((DATA / "apron-gemma-4-31b-it-lmo-h100-0.29.0-peak-probe.json").read_text())
    sizes = [b.get("size", b["requested_size"]) for b in probe["compile_blocks_at_peak"]]
    assert sizes[:5] == [262144 * 5376 * 2, 8192 * 5376 * 2, 8192 * 5376 * 2, 8192 * 4, 5376 * 2]
    assert sum(sizes) == probe["phase_at_peak"]["compile"] == 2_994_777_088
    gemma = Shapes(hidden=5376, intermediate=21504, moe_intermediate=0, experts=0, top_k=0, q_width=8192,
                   kv_width=4096, vocab=262144, dtype_bytes=2)
    total, how = compile_examples(gemma, 1, 8192)
    # all but Gemma's 2 B embedding normalizer (one 512 B block), which kvcalc does not model
    assert total == 2_994_777_088 - 512
    assert "table 262144 x 5376 x 2 B" in how


def test_the_logged_torch_peak_of_a_cold_0_29_start_on_an_rtx_4090() -> None:
    # tests/data/vllm-budget/apron-qwen3-8b-rtx4090-u0.92-0.29.0.log: "Memory profiling takes 39.37 seconds. ...
    # torch peak memory increase: 1.19GiB; total consumed (from mem_get_info): 15.54GiB; weights memory: 15.27GiB."
    # Qwen3-8B (hidden 4096, vocab 151936), 2048 batched tokens and 256 seqs (vLLM's serve defaults under 70 GiB):
    #   151936 x 4096 x 2 + 2 x (2048 x 4096 x 2) + 2048 x 4 + 4096 x 2 = 1,278,230,528 B = 1.19 GiB
    s = Settings().with_(gpu="RTX-4090", vllm_version="0.29.0", gpu_memory_utilization=0.92, max_model_len=40960)
    values, sources = predict(resolve("qwen3-8b").spec, s)
    assert values["torch_peak"] == 1_278_230_528
    assert round(values["torch_peak"] / GIB, 2) == 1.19
    assert "autotune examples of the embedding kernel" in sources["torch_peak"]
    # the free-memory delta of 0.29 also counts V2's penalty state (256 x 151936 x 4 B + 256 x 4748 x 4 B);
    # kvcalc's consumed = weights + 32 MiB kernel modules + that state; logged consumed - weights = 0.27 GiB
    state = 256 * 151936 * 4 + 256 * 4748 * 4
    assert values["non_torch"] == 32 * (1 << 20) + state
    warm = predict(resolve("qwen3-8b").spec, s.with_(compile_cache="warm"))[0]
    # warm: the forward over 2048 tokens, 2048 x (3 x 12288 + 2 x 4096) x 2 B, is the peak again
    assert warm["torch_peak"] == 2048 * (3 * 12288 + 2 * 4096) * 2
    assert warm["available"] - values["available"] == 1_278_230_528 - warm["torch_peak"]


def test_which_release_lines_and_settings_compile_with_examples() -> None:
    llama = resolve("llama-3.1-8b").spec
    s = Settings().with_(gpu="RTX-4090", max_model_len=8192)
    examples = 128256 * 4096 * 2 + 2 * 2048 * 4096 * 2 + 2048 * 4 + 4096 * 2

    def peak(**kw: object) -> int:
        return predict(llama, s.with_(**kw))[0]["torch_peak"]

    # VLLM_USE_STANDALONE_COMPILE off by default in 0.11.x, torch < 2.8 in 0.10.1: no compile-time autotuning
    assert not rules_for("0.11.0")[0].compile_examples and not rules_for("0.10.1.1")[0].compile_examples
    assert rules_for("0.10.2")[0].compile_examples and rules_for("0.12.0")[0].compile_examples
    assert peak(vllm_version="0.29.0") == examples
    assert peak(vllm_version="0.29.0", enforce_eager=True) < examples  # no torch.compile with --enforce-eager
    assert peak(vllm_version="0.29.0", compile_cache="warm") < examples
    assert peak(vllm_version="0.11.0") != examples
    # TP 2: 0.28 runs the masked gather through Inductor (the table's half, one output, no norm weight);
    # 0.29 runs vLLM's fused embedding op, which Inductor does not autotune
    half = 128256 // 2 * 4096 * 2 + 2048 * 4096 * 2 + 2048 * 4
    s2 = Settings().with_(gpu="RTX-4090", max_model_len=8192, tp=2, compile_cache="cold")
    assert predict(llama, s2.with_(vllm_version="0.28.0", max_num_seqs=8))[0]["torch_peak"] == half
    assert predict(llama, s2.with_(vllm_version="0.29.0", max_num_seqs=8))[0]["torch_peak"] < half


def test_compile_cache_is_checked_and_reaches_the_cli() -> None:
    llama = resolve("llama-3.1-8b").spec
    with pytest.raises(PlanError, match="--compile-cache"):
        predict(llama, Settings().with_(gpu="RTX-4090", vllm_version="0.29.0", compile_cache="tepid"))
    runner, app = CliRunner(), build_app()
    bad = runner.invoke(app, ["size", "llama-3.1-8b", "--gpu", "RTX-4090", "--vllm-version", "0.29.0", "--compile-cache", "tepid"])
    assert bad.exit_code == 2 and "--compile-cache" in bad.output and "cold, warm" in bad.output
    out = {}
    for cache in ("cold", "warm"):
        res = runner.invoke(app, ["size", "llama-3.1-8b", "--gpu", "RTX-4090", "--vllm-version", "0.29.0",
                                  "--max-model-len", "8192", "--compile-cache", cache, "--format", "json"])
        assert res.exit_code == 0, res.output
        terms = json.loads(res.output)["pool"]["budget"][0]
        out[cache] = {t["term"]: t["bytes"] for t in terms}
    peak = "- profile-run peak (torch)"
    assert out["cold"][peak] == 128256 * 4096 * 2 + 2 * 2048 * 4096 * 2 + 2048 * 4 + 4096 * 2
    assert out["warm"][peak] < out["cold"][peak]


def test_parse_budget_reads_the_0_29_debug_line_and_the_0_31_summary() -> None:
    text = (DATA / "apron-qwen3-8b-rtx4090-u0.92-0.29.0.log").read_text()
    figures, settings = parse_budget(text)
    assert figures["torch_peak_gib"] == 1.19 and figures["consumed_gib"] == 15.54 and figures["available_kv_gib"] == 4.48
    assert settings["gpu_memory_utilization"] == 0.92
    summary = ("Free memory on device (78.84/79.25 GiB) on startup. Desired GPU memory utilization is (0.92, 72.91 GiB). "
               "Actual usage is 15.26 GiB for consumed memory (weights + non-torch), 1.44 GiB for peak activation, "
               "and 0.23 GiB for CUDAGraph memory.")
    figures = parse_budget(summary)[0]
    assert figures["peak_activation_gib"] == 1.44 and "torch_peak_gib" not in figures and figures["consumed_gib"] == 15.26


def test_parse_budget_reads_the_compile_cache_state_vllm_logs() -> None:
    # INFO lines of vllm==0.29.0 compilation/backends.py:292-296 (artifacts loaded) and :393-397 (a cold compile)
    warm = ("(EngineCore pid=1) INFO 09-12 17:09:40 [backends.py:292] Directly load the compiled graph(s) for compile "
            "range (1, 2048) from the cache, took 2.417 s\nINFO Available KV cache memory: 11.06 GiB\n")
    cold = ("(EngineCore pid=1) INFO 09-12 17:09:58 [backends.py:393] Compiling a graph for compile range (1, 2048) "
            "takes 21.54 s\nINFO Available KV cache memory: 11.06 GiB\n")
    assert parse_budget(warm)[1]["compile_cache"] == "warm"
    assert parse_budget(cold)[1]["compile_cache"] == "cold"
    assert "compile_cache" not in parse_budget("INFO Available KV cache memory: 11.06 GiB\n")[1]
