"""--enable-expert-parallel: whole experts per rank (vLLM's ep_size = TP x DP) and the fused-MoE
buffers at the full expert width, by hand."""

from __future__ import annotations

from kvcalc.app.budget_check import predict
from kvcalc.app.settings import Settings
from kvcalc.core.budget_rules import Shapes, moe_workspace
from kvcalc.core.vllm_rules import rules_for
from kvcalc.sources.resolve import resolve

H100 = dict(gpu="H100-80GB", vllm_version="0.19.0", max_model_len=8192)


def _weights(model: str, **kw) -> int:
    values, _ = predict(resolve(model).spec, Settings().with_(**H100, **kw))
    return values["weights"]


def test_dp_with_expert_parallel_halves_the_experts_per_rank():
    # Qwen3-30B-A3B: 48 MoE layers of 128 experts, each gate + up + down = 3 x 2048 x 768, bf16. With DP 2 and
    # expert parallelism each rank holds 64 whole experts per layer; every expert tensor (w13 768 MiB, w2 384 MiB
    # a layer, halved to 384 and 192) is a whole 2 MiB multiple, so the allocator adds nothing either way
    experts = 48 * 128 * 3 * 2048 * 768 * 2
    assert experts == 57_982_058_496
    assert _weights("qwen3-30b-a3b", dp=2) - _weights("qwen3-30b-a3b", dp=2, enable_expert_parallel=True) == experts // 2
    # without DP, ep_size = TP: at TP 2 the same bytes per rank either way (whole experts / 2 = sliced experts)
    assert _weights("qwen3-30b-a3b", tp=2) == _weights("qwen3-30b-a3b", tp=2, enable_expert_parallel=True)


def test_fused_moe_buffers_take_the_full_expert_width():
    # Mixtral-8x7B at TP 2: hidden 4096, expert intermediate 14336, top-2. Sliced by TP, N = 2 x 14336 / 2 = 14336;
    # with whole experts N = 28672. mnbt 8192 fits one chunk:
    # workspace13 (M, top_k, max(N/2, K)) shared with the output (M, K), workspace2 (M, top_k, max(N, K)), bf16
    line = rules_for("0.19.0")[0]
    base = dict(hidden=4096, intermediate=14336, moe_intermediate=14336, experts=8, top_k=2, q_width=4096,
                kv_width=1024, vocab=32000, dtype_bytes=2)
    sliced = moe_workspace(Shapes(**base), 2, 8192, line)[0]
    whole = moe_workspace(Shapes(**base, experts_sliced=False), 2, 8192, line)[0]
    assert sliced == 8192 * 2 * 7168 * 2 + 8192 * 2 * 14336 * 2
    assert whole == 8192 * 2 * 14336 * 2 + 8192 * 2 * 28672 * 2


def test_the_flag_is_vllm_only(run_json):
    out = run_json("size", "qwen3-30b-a3b", "--gpu", "H100-80GB", "--tokens", "100", "--tp", "2", "--enable-expert-parallel")
    weights = next(t for t in out["pool"]["budget"][0] if t["term"].startswith("- weights"))
    assert "expert parallelism" in weights["source"]
    # SGLang has its own expert-parallel flags: under --engine sglang the vLLM flag is ignored, and said so
    sg = run_json("size", "qwen3-30b-a3b", "--engine", "sglang", "--gpu", "H100-80GB", "--tokens", "100", "--enable-expert-parallel")
    assert "--enable-expert-parallel is a vLLM setting: ignored under --engine sglang" in str(sg)
