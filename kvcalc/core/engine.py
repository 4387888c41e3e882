"""vLLM engine defaults that move KV numbers, per release line (0.33 current, 0.20 older).

Sources (vLLM 0.33.0 wheel): ``engine/arg_utils.py:get_batch_defaults``,
``config/vllm.py`` (max_in_flight_tokens, max_concurrent_batches), the attention
backends' supported kernel block sizes (``v1/attention/backends/*``).
"""

from __future__ import annotations

from kvcalc.core.model import ModelSpec
from kvcalc.errors import PlanError

GIB = 1 << 30

# backend -> (block size chosen when --block-size is not given, is an MLA backend)
BACKENDS: dict[str, tuple[int, bool]] = {
    "FLASH_ATTN": (16, False),
    "FLASHINFER": (16, False),
    "TRITON_ATTN": (16, False),
    "FLEX_ATTENTION": (16, False),
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
        raise PlanError(f"--attention-backend {name!r} is not known; valid: {', '.join(BACKENDS)}")
    size, mla_backend = BACKENDS[key]
    if mla_backend != model.mla:
        kind = "an MLA" if mla_backend else "a non-MLA"
        raise PlanError(f"--attention-backend {key} is {kind} backend; {model.name} uses {model.attention}")
    return size


def default_max_num_batched_tokens(gpu_memory_bytes: int | None, gpu_name: str | None, version: str) -> tuple[int, str]:
    """`vllm serve`'s default scheduler token budget for the device (get_batch_defaults)."""
    if gpu_memory_bytes is None:
        return 2048, "vLLM serve default for an unknown GPU (2048); pass --gpu or --max-num-batched-tokens"
    name = (gpu_name or "").lower()
    if version == "0.33" and gpu_memory_bytes >= 160 * GIB:
        return 16384, "vLLM 0.33 serve default for GPUs of >= 160 GiB"
    if gpu_memory_bytes >= 70 * GIB and "a100" not in name:
        return 8192, "vLLM serve default for GPUs of >= 70 GiB other than A100"
    return 2048, "vLLM serve default for A100 and GPUs under 70 GiB"


def max_concurrent_batches(pp: int, version: str, override: int | None) -> tuple[int, str]:
    """Batches in flight: 0.33 async scheduling with model runner V2 keeps pp + 1."""
    if override is not None:
        if override < 1:
            raise PlanError(f"--max-concurrent-batches must be a positive integer, got {override}")
        return override, "--max-concurrent-batches"
    if version == "0.20":
        return 1, "vLLM 0.20 reserves max_num_batched_tokens (no concurrency factor)"
    return pp + 1, "vLLM 0.33 default: async scheduling + model runner V2 -> pp + 1"
