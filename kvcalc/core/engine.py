"""vLLM engine defaults that move KV numbers, per release line (the ``RuleLine`` of the release).

Sources (vLLM 0.33.0 wheel): ``engine/arg_utils.py:get_batch_defaults``,
``config/vllm.py`` (max_in_flight_tokens, max_concurrent_batches), the attention
backends' supported kernel block sizes (``v1/attention/backends/*``).
"""

from __future__ import annotations

from kvcalc.core import vllm_rules as R
from kvcalc.core.model import ModelSpec
from kvcalc.errors import PlanError, named

GIB = 1 << 30

# backend -> (block size chosen when --block-size is not given, is an MLA backend)
BACKENDS: dict[str, tuple[int, bool]] = {
    "FLASH_ATTN": (16, False),
    "FLASHINFER": (16, False),
    "TRITON_ATTN": (16, False),
    "FLEX_ATTENTION": (16, False),
    # ROCm: kernel block sizes 16 | multiples of 16 (vllm==0.33.0: v1/attention/backends/rocm_attn.py:153-165,
    # rocm_aiter_fa.py:912-913, rocm_aiter_unified_attn.py:73-74), so vLLM's default 16 stands
    "ROCM_ATTN": (16, False),
    "ROCM_AITER_FA": (16, False),
    "ROCM_AITER_UNIFIED_ATTN": (16, False),
    "FLASH_ATTN_MLA": (16, True),
    "TRITON_MLA": (16, True),
    "FLASHMLA": (64, True),
    "FLASHINFER_MLA": (32, True),
    "CUTLASS_MLA": (128, True),
    "FLASHMLA_SPARSE": (64, True),
}


def backend_block_size(name: str, model: ModelSpec) -> int:
    key = name.strip().upper().replace("-", "_")
    if key not in BACKENDS:
        raise PlanError(f"{named('attention_backend')} {name!r} is not known; valid: {', '.join(BACKENDS)}")
    size, mla_backend = BACKENDS[key]
    if mla_backend != model.mla:
        kind = "an MLA" if mla_backend else "a non-MLA"
        raise PlanError(f"{named('attention_backend')} {key} is {kind} backend; {model.name} uses {model.attention}")
    return size


def _batch_tier(gpu_memory_bytes: int, gpu_name: str | None, rules: R.RuleLine) -> tuple[int, int, str]:
    """(max_num_batched_tokens, max_num_seqs, why) of `vllm serve` on this GPU under the
    release's table (docs/vllm-releases.md section 8; vllm==0.8.0: engine/arg_utils.py:1693-1715,
    0.8.4: :1669-1682, 0.8.5: :1596-1609, 0.9.0: :1495, 0.28.0: :2582-2590, 0.33.0: :2983-2987)."""
    name = (gpu_name or "").lower()
    table = rules.batch_defaults
    if table in (R.BATCH_BY_NAME, R.BATCH_BY_NAME_SEQS):
        if "h100" in name or "h200" in name:
            return 8192, 1024, f"vLLM {rules.label} serve default on H100/H200 (by GPU name)"
        return 2048, (1024 if table == R.BATCH_BY_NAME else 256), f"vLLM {rules.label} serve default on GPUs other than H100/H200"
    if table in (R.BATCH_160GIB, R.BATCH_160GIB_NO_GB10) and gpu_memory_bytes >= 160 * GIB:
        return 16384, 1024, f"vLLM {rules.label} serve default for GPUs of >= 160 GiB"
    excluded = () if table == R.BATCH_70GIB else ("a100", "gb10") if table == R.BATCH_160GIB_NO_GB10 else ("a100",)
    if gpu_memory_bytes >= 70 * GIB and not any(x in name for x in excluded):
        other = f" other than {'/'.join(x.upper() for x in excluded)}" if excluded else ""
        return 8192, 1024, f"vLLM {rules.label} serve default for GPUs of >= 70 GiB{other}"
    return 2048, 256, f"vLLM {rules.label} serve default for the smaller GPUs"


USAGE_CONTEXTS = ("serve", "llm", "engine")


def usage_tier(tokens: int, seqs: int, why: str, usage: str | None, rules: R.RuleLine) -> tuple[int, int, str]:
    """The batch defaults of how vLLM was started (its UsageContext), from `vllm serve`'s (tokens, seqs).
    The LLM class takes 16384 batched tokens where serve takes 8192 or 16384 and 8192 where serve takes
    2048, the same max_num_seqs (get_batch_defaults: vllm==0.9.2 engine/arg_utils.py:1629-1647, 0.15.0 and
    0.20.1 alike, 0.33.0 with its 160 GiB tier); LLMEngine built directly (ENGINE_CONTEXT, e.g.
    LLMEngine.from_engine_args: vllm==0.10.2 v1/engine/llm_engine.py:142-148) has no entry there, so the
    scheduler's own 2048 tokens and 128 seqs stay (config/scheduler.py:186; 0.33.0: :41-43). Read from 0.9.0."""
    key = (usage or "serve").strip().lower()
    if key not in USAGE_CONTEXTS:
        raise PlanError(f"{named('usage_context')} {usage!r} is not known; valid: {', '.join(USAGE_CONTEXTS)}")
    if key == "serve":
        return tokens, seqs, why
    if rules.batch_defaults in (R.BATCH_BY_NAME, R.BATCH_BY_NAME_SEQS):
        raise PlanError(f"{named('usage_context')} {key}: kvcalc reads its batch defaults from vLLM 0.9.0 on; pass "
                        f"{named('max_num_batched_tokens')} and {named('max_num_seqs')}")
    if key == "engine":
        return 2048, 128, f"vLLM {rules.label} engine defaults (LLMEngine built directly: no batch defaults of its own)"
    return (16384 if tokens >= 8192 else 8192), seqs, f"vLLM {rules.label} LLM-class default ({why.split(': ')[-1]})"


def default_max_num_batched_tokens(
    gpu_memory_bytes: int | None,
    gpu_name: str | None,
    rules: R.RuleLine = R.CURRENT,
    max_model_len: int | None = None,
    chunked_prefill: bool = True,
    usage: str | None = None,
) -> tuple[int, str]:
    """The default scheduler token budget for the device and how vLLM was started (get_batch_defaults,
    ``usage_tier``), capped at max_num_seqs x max_model_len as the engine args do for default settings;
    without chunked prefill (encoder-decoder models) at least max_model_len
    (vllm==0.33.0: vllm/engine/arg_utils.py:3190-3199)."""
    if gpu_memory_bytes is None:
        tokens, seqs, why = 2048, 256, "vLLM serve default for an unknown GPU (2048); pass --gpu or --max-num-batched-tokens"
    else:
        tokens, seqs, why = _batch_tier(gpu_memory_bytes, gpu_name, rules)
    tokens, seqs, why = usage_tier(tokens, seqs, why, usage, rules)
    if max_model_len is not None and not chunked_prefill and max_model_len > tokens:
        return max_model_len, f"{why}, raised to max_model_len {max_model_len} (no chunked prefill)"
    if max_model_len is not None and seqs * max_model_len < tokens:
        return seqs * max_model_len, f"{why}, capped at max_num_seqs {seqs} x max_model_len {max_model_len}"
    return tokens, why


def max_concurrent_batches(pp: int, rules: R.RuleLine, override: int | None) -> tuple[int, str]:
    """Batches in flight the sliding-window reservation counts: from 0.26.0 async scheduling with
    model runner V2 keeps pp + 1 (vllm==0.26.0: vllm/config/vllm.py:512-521); before, one batch
    of max_num_batched_tokens (vllm==0.25.1: vllm/v1/kv_cache_interface.py:561)."""
    if override is not None:
        if override < 1:
            raise PlanError(f"{named('max_concurrent_batches')} must be a positive integer, got {override}")
        return override, "--max-concurrent-batches"
    if not rules.in_flight_batches:
        return 1, f"vLLM {rules.label} reserves max_num_batched_tokens (no concurrency factor)"
    return pp + 1, f"vLLM {rules.label} default: async scheduling + model runner V2 -> pp + 1"
