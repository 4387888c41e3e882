"""The CUDA-graph term of the budget: vLLM's estimate of the graphs it will capture after sizing the KV
cache (subtracted from 0.20: model runner V1 through 0.28, model runner V2 from 0.29), or what the settings
say instead (--cudagraph-bytes, --enforce-eager, a release that does not subtract it, 0.22-0.28's model
runner V2, which estimates nothing)."""

from __future__ import annotations

from kvcalc.app.runner import v2_by_default
from kvcalc.app.settings import Settings
from kvcalc.core.budget_device import capture_sizes, cudagraph_estimate, flashinfer_workspace
from kvcalc.core.budget_rules import Shapes
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan
from kvcalc.core.units import parse_size
from kvcalc.core.vllm_rules import RuleLine, parse_release
from kvcalc.errors import PlanError, named

HOPPER = 90
GPT_OSS_MAX_CAPTURE = 1024  # gpt-oss's largest CUDA-graph size (below)
FA3_MAX_HEAD_DIM = 256  # FA3's largest head size (hopper/flash_api.cpp get_max_headdim)
FA3_LAYER_KINDS = frozenset({"full", "sliding"})


def fa3_full_graphs(s: Settings, model: ModelSpec, plan: ParallelPlan, sm: int) -> tuple[int, int] | None:
    """(query heads per rank, V head size) where vLLM's FULL graphs run FlashAttention 3: a Hopper GPU
    (FA3 on compute capability 9.x, vllm==0.20.1: v1/attention/backends/fa_utils.py:78), whose
    backend order puts FLASH_ATTN first for attention that is not MLA (platforms/cuda.py
    _get_backend_priorities), with self-attention layers only and no other backend asked for."""
    if sm != HOPPER or model.mla or s.attention_backend not in (None, "FLASH_ATTN"):
        return None
    # every layer's head size: Gemma 4's 512-wide full-attention heads make vLLM force TRITON_ATTN for all layers
    # (vllm==0.33.0: model_executor/models/config.py:301, Gemma4Config.verify_and_update_config; 0.19.0: :61)
    widest = max((max(x.head_size, x.head_size_v) for x in model.layers), default=0)
    if not set(model.kinds) <= FA3_LAYER_KINDS or max(model.head_dim, model.head_dim_v, widest) > FA3_MAX_HEAD_DIM:
        return None
    return model.num_attention_heads // plan.tp, model.head_dim_v


TURING, AMPERE, ADA, BLACKWELL_DC, BLACKWELL_RTX = 75, 80, 89, 100, 120


def flashinfer_full_graphs(s: Settings, model: ModelSpec, sm: int, line: RuleLine) -> bool:
    """Whether FlashInfer's decode wrappers serve the FULL graphs: asked for with --attention-backend, or
    vLLM's pick for an FP8 KV cache on Ampere/Ada and on the sm120 family (RTX 50xx, RTX PRO 6000), where
    FLASH_ATTN takes no FP8 KV cache (vllm==0.24.0: v1/attention/backends/flash_attn.py:183-193, FA3 on sm90
    only; vllm==0.27.1: :229, "FP8 KV cache requires FA3 on SM90 or FA4 on SM100") and FLASHINFER is next in
    the order (platforms/cuda.py:152-158; the hpml 0.19 A100/RTX A6000 logs print "Using FLASHINFER attention
    backend" for --kv-cache-dtype fp8, a 0.27.1 start on 2 x RTX 5090 picks it out of ['FLASHINFER',
    'TRITON_ATTN']). On the sm100 family FlashInfer decodes through trtllm-gen, without the
    wrappers (vllm==0.22.0: utils/flashinfer.py:335-347, supports_trtllm_attention). On Turing FlashInfer is
    vLLM's pick up to 0.23 (``RuleLine.flashinfer_on_turing``)."""
    if model.mla or BLACKWELL_DC <= sm < BLACKWELL_DC + 10:
        return False
    if s.attention_backend is not None:
        return s.attention_backend == "FLASHINFER"
    if TURING <= sm < AMPERE:
        return line.flashinfer_on_turing
    fa2_only = AMPERE <= sm <= ADA or BLACKWELL_RTX <= sm < BLACKWELL_RTX + 10
    return fa2_only and s.kv_dtype.startswith("fp8")


def cudagraph_term(
    s: Settings, line: RuleLine, shapes: Shapes, model: ModelSpec, plan: ParallelPlan, mnbt: int, seqs: int, sm: int
) -> tuple[int, str]:
    """The bytes vLLM takes out of the KV budget for CUDA graphs, and why."""
    if s.cudagraph_bytes is not None:
        return parse_size(s.cudagraph_bytes, named("cudagraph_bytes")), "--cudagraph-bytes"
    if s.enforce_eager:
        return 0, "--enforce-eager: no CUDA graphs"
    if not line.cudagraphs_subtracted:
        return 0, f"vLLM {line.label} does not subtract CUDA graphs (captured after sizing, out of the 1 - utilization headroom)"
    v2 = v2_by_default(line, model, s)  # 0.29+'s V2 estimates its graphs (below)
    if v2:  # vllm==0.24.0: v1/worker/gpu/model_runner.py:684-686 (0.22.0: :620-622; 0.25.0: :680-682; 0.28.0: :843-845)
        return 0, f"model runner V2 (vLLM {line.label} default for {v2}) estimates no CUDA-graph memory (profile_cudagraph_memory returns 0)"
    if s.cudagraph_capture_sizes:
        sizes = tuple(sorted({int(x) for x in str(s.cudagraph_capture_sizes).split(",") if x.strip()}))
        if not sizes or min(sizes) < 1:
            raise PlanError(f"{named('cudagraph_capture_sizes')} must be positive integers, got {s.cudagraph_capture_sizes!r}")
    else:  # gpt-oss raises the largest size to 1024 unless the sizes are given (GptOssForCausalLMConfig.
        # verify_and_update_config: vllm==0.28.0 model_executor/models/config.py:393-412; 0.10.2: :262-287, the same list)
        q = 1 + model.speculative_tokens if parse_release(s.vllm_version) >= (0, 13) else 1  # decode rows x (1 + K)
        sizes = capture_sizes(seqs, mnbt, GPT_OSS_MAX_CAPTURE if model.model_type == "gpt_oss" else 0, q)
    # chunked local attention supports no CUDA graphs of its own (AttentionCGSupport.NEVER), so vLLM falls
    # back to PIECEWISE graphs only (vllm==0.20.1: model_executor/layers/attention/chunked_local_attention.py:42-49,
    # config/compilation.py:1345-1360)
    full_up_to = 0 if "chunked" in model.kinds else seqs
    flashinfer = flashinfer_full_graphs(s, model, sm, line)
    # model runner V1 (the 0.20-0.28 lines, or a 0.29+ line a drafter sends back to V1) allocates FlashInfer's
    # workspace inside the first FULL sample; V2 shares one allocated before (core.budget_device.FLASHINFER_WORKSPACE)
    ws = flashinfer_workspace(line, mnbt, model.num_attention_heads // plan.tp, model.head_dim) if flashinfer and not line.v2_for_all else 0
    return cudagraph_estimate(shapes, plan.tp, sizes, full_up_to, fa3_full_graphs(s, model, plan, sm), flashinfer, ws)
