"""The fused-MoE workspace that vLLM 0.14+ keeps in its WorkspaceManager from the profile forward
through the dummy sampler run (docs/vllm-budget.md 2.3). Expected bytes are worked out by hand
from each preset's config.json and TritonExperts.workspace_shapes:
workspace13 = (M, top_k, max(N/2, K)) shared with the output (M, K), workspace2 = (M, top_k, max(N, K)),
N = 2 x moe_intermediate_size / TP, K = hidden_size, bf16 (vllm==0.19.0: fused_moe/fused_moe.py:1976-1991,
modular_kernel.py:1033-1066)."""

from __future__ import annotations

from kvcalc.app.settings import Settings
from kvcalc.core.budget_rules import Shapes, moe_workspace, profile_peak
from kvcalc.core.vllm_rules import rules_for
from kvcalc.sources.resolve import resolve

MIB = 1 << 20


def _peak(preset: str, **kw: object) -> int:
    from kvcalc.app.budget_check import predict

    return int(predict(resolve(preset).spec, Settings().with_(**kw))[0]["torch_peak"])


def test_qwen3_30b_a3b_workspace_by_hand() -> None:
    # hidden 2048, moe_intermediate 768, top_k 8: N = 1536, N/2 = 768, K = 2048, M = 8192
    ws13 = 8192 * 8 * max(768, 2048) * 2  # 256 MiB (>= output 8192 x 2048 x 2 = 32 MiB)
    ws2 = 8192 * 8 * max(1536, 2048) * 2  # 256 MiB
    assert ws13 + ws2 == 512 * MIB
    peak = _peak("qwen3-30b-a3b", gpu="H100-80GB", vllm_version="0.19.0", gpu_memory_utilization=0.95,
                 max_model_len=8192)
    sampler = 1024 * 151936 * 14  # max_num_seqs 1024 on H100 x vocab x Triton path 14 B
    retained = 8192 * 2048 * 2  # the dummy run's hidden states
    topk = 132 * 151936 * 4  # the Triton top-k/top-p buffer: H100's 132 SMs x vocab x fp32 (2.3.2)
    assert peak == ws13 + ws2 + sampler + retained + topk  # 2.63 GiB; log: 2.68 (2.56 before the buffer, 2.06 before the workspace)


def test_deepseek_v2_lite_workspace_by_hand() -> None:
    # hidden 2048, moe_intermediate 1408, top_k 6: N = 2816, N/2 = 1408, K = 2048, M = 8192
    ws13 = 8192 * 6 * max(1408, 2048) * 2  # 192 MiB
    ws2 = 8192 * 6 * max(2816, 2048) * 2  # 264 MiB
    peak = _peak("deepseek-v2-lite", gpu="H100-80GB", vllm_version="0.19.0", gpu_memory_utilization=0.95,
                 max_model_len=8192)
    # + the Triton top-k/top-p buffer, 132 SMs x vocab x 4 B
    assert peak == ws13 + ws2 + 1024 * 102400 * 14 + 8192 * 2048 * 2 + 132 * 102400 * 4  # 1.89 GiB; log: 1.93


def test_mixtral_tp2_workspace_by_hand() -> None:
    # hidden 4096, intermediate 14336, top_k 2, TP 2: N = 2 x 14336 / 2 = 14336, N/2 = 7168
    ws = 8192 * 2 * 7168 * 2 + 8192 * 2 * 14336 * 2  # 224 + 448 MiB
    peak = _peak("mixtral-8x7b-v0.1", gpu="H100-80GB", vllm_version="0.19.0", tp=2, gpu_memory_utilization=0.95,
                 max_model_len=8192)
    # + the Triton top-k/top-p buffer, 132 SMs x vocab x 4 B (every TP rank samples the full vocab)
    assert peak == ws + 1024 * 32000 * 14 + 8192 * 4096 * 2 + 132 * 32000 * 4  # 1.16 GiB; log: 1.21


def test_workspace_per_release() -> None:
    # Qwen3-30B-A3B's config.json
    s = Shapes(hidden=2048, intermediate=6144, moe_intermediate=768, experts=128, top_k=8, q_width=4096,
               kv_width=512, vocab=151936, dtype_bytes=2)
    # 0.13 and earlier: fused_experts_impl allocates per call, nothing is left under the sampler
    assert moe_workspace(s, 1, 8192, rules_for("0.13.0")[0])[0] == 0
    assert moe_workspace(s, 1, 8192, rules_for("0.19.0")[0])[0] == 512 * MIB
    assert moe_workspace(s, 1, 8192, rules_for("0.33.0")[0])[0] == 512 * MIB
    # TP 4: N = 2 x 768 / 4 = 384; both workspaces are bound by K = 2048, so no change
    assert moe_workspace(s, 4, 8192, rules_for("0.19.0")[0])[0] == 512 * MIB
    # 0.14-0.17 chunk M at 16384: 32768 tokens hold two chunk-sized workspaces and the full output apart
    chunked = 16384 * 8 * 2048 * 2 * 2 + 32768 * 2048 * 2  # 1 GiB + 128 MiB
    assert moe_workspace(s, 1, 32768, rules_for("0.17.0")[0])[0] == chunked
    assert moe_workspace(s, 1, 32768, rules_for("0.19.0")[0])[0] == 32768 * 8 * 2048 * 2 * 2  # 2 GiB, no chunks
    # the sampler side carries it
    assert profile_peak(s, 1, 8192, 1024, 14, kept=512 * MIB)[0] == 512 * MIB + 1024 * 151936 * 14 + 8192 * 2048 * 2
    dense = Shapes(hidden=4096, intermediate=14336, moe_intermediate=0, experts=0, top_k=0, q_width=4096,
                   kv_width=1024, vocab=128256, dtype_bytes=2)
    assert moe_workspace(dense, 1, 8192, rules_for("0.19.0")[0])[0] == 0


def test_quantized_experts_not_charged() -> None:
    # gpt-oss (MXFP4) on H100 runs the monolithic Triton kernel, outside the workspace manager
    # (vllm==0.19.0: fused_moe/oracle/mxfp4.py:103-110): no workspace, the peak is as before
    base = _peak("gpt-oss-20b", gpu="H100-80GB", vllm_version="0.13.0", max_model_len=8192, sampler="triton")
    new = _peak("gpt-oss-20b", gpu="H100-80GB", vllm_version="0.19.0", max_model_len=8192)
    assert new == base


def test_fp8_experts_kernel_per_gpu_and_release() -> None:
    from kvcalc.core.quant import fp8_moe_kernel

    v19, v16 = rules_for("0.19.0")[0], rules_for("0.16.0")[0]
    # no native FP8 before sm89: MarlinExperts (sm75+); Triton's FP8 path needs sm89 (vllm==0.19.0 fused_moe.py:1934)
    assert fp8_moe_kernel(v19, 80, True, False) == "Marlin"
    assert fp8_moe_kernel(v19, 75, False, False) == "Marlin"
    assert fp8_moe_kernel(v19, 70, True, False) == ""
    # sm89: FlashInfer, DeepGEMM and CUTLASS grouped GEMM need sm90+ (_custom_ops.py:879-881)
    assert fp8_moe_kernel(v19, 89, True, True) == "Triton"
    # Hopper, block scales: Triton for TP from 0.17 ("prefer Triton for TP and FI CUTLASS for EP")
    assert fp8_moe_kernel(v19, 90, True, False) == "Triton"
    assert fp8_moe_kernel(v19, 90, True, True) == ""
    assert fp8_moe_kernel(v19, 90, False, False) == ""
    assert fp8_moe_kernel(v16, 90, True, False) == ""
    assert fp8_moe_kernel(v19, 100, True, False) == "" and fp8_moe_kernel(v19, 0, True, False) == ""


def test_fp8_experts_workspace_by_hand() -> None:
    # Qwen3-30B-A3B with --quantization fp8 on an A100 (Marlin FP8 experts), 2048 batched tokens, 256 sequences:
    # MarlinExperts: (M x top_k, max(I, K)) with the output (M, K), and M x top_k x max(2I, K); I = 768, K = 2048
    ws = 2048 * 8 * max(768, 2048) * 2 + 2048 * 8 * max(2 * 768, 2048) * 2  # 64 + 64 MiB
    sampler = 256 * 151936 * 14 + 2048 * 2048 * 2  # Triton top-k/top-p path, 14 B per logit; retained hidden states
    topk = 108 * 151936 * 4  # A100's 108 SMs x vocab x fp32
    kw = dict(vllm_version="0.19.0", max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=2048,
              compile_cache="warm", quantization="fp8")
    assert _peak("qwen3-30b-a3b", gpu="A100-80GB", **kw) == ws + sampler + topk
    # the same on an H100: per-tensor FP8 experts take FlashInfer/CUTLASS kernels there, not modelled
    assert _peak("qwen3-30b-a3b", gpu="H100-80GB", **kw) == 256 * 151936 * 14 + 2048 * 2048 * 2 + 132 * 151936 * 4


def test_mxfp4_marlin_experts_keep_the_workspace_from_0_17() -> None:
    from kvcalc.core.quant import workspace_kernel

    q = {"quant_method": "mxfp4"}
    # 0.17+: MXFP4 experts go through the modular kernel; before sm90 that is MarlinExperts (TritonExperts' shapes)
    assert workspace_kernel(rules_for("0.19.0")[0], "mxfp4", q, 80, False) == "Marlin"
    assert workspace_kernel(rules_for("0.28.0")[0], "mxfp4", q, 89, False) == "Marlin"
    # 0.14-0.16 call fused_marlin_moe directly (caches per call); Hopper runs the monolithic Triton kernel
    assert workspace_kernel(rules_for("0.16.0")[0], "mxfp4", q, 80, False) == ""
    assert workspace_kernel(rules_for("0.19.0")[0], "mxfp4", q, 90, False) == ""
    # gpt-oss-20b on an A100, 0.19.0, warm cache, 2048 batched tokens, 256 seqs: hidden 2880, I 2880, top-4
    ws = 2048 * 4 * max(2880, 2880) * 2 + 2048 * 4 * max(2 * 2880, 2880) * 2  # 45 + 90 MiB
    peak = _peak("gpt-oss-20b", gpu="A100-80GB", vllm_version="0.19.0", max_model_len=8192, max_num_seqs=256,
                 max_num_batched_tokens=2048, compile_cache="warm")
    sampler = 256 * 201088 * 14 + 2048 * 2880 * 2 + 108 * 201088 * 4  # Triton path, retained states, top-k buffer
    assert peak == ws + sampler
