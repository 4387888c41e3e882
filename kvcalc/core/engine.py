"""vLLM engine defaults that move KV numbers, per release line (0.33 current, 0.20 older).

Sources (vLLM 0.33.0 wheel): ``engine/arg_utils.py:get_batch_defaults``,
``config/vllm.py`` (max_in_flight_tokens, max_concurrent_batches), the attention
backends' supported kernel block sizes (``v1/attention/backends/*``).
"""

from __future__ import annotations

from kvcalc.core.model import ModelSpec
from kvcalc.errors import PlanError, named

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
        raise PlanError(f"{named('attention_backend')} {name!r} is not known; valid: {', '.join(BACKENDS)}")
    size, mla_backend = BACKENDS[key]
    if mla_backend != model.mla:
        kind = "an MLA" if mla_backend else "a non-MLA"
        raise PlanError(f"{named('attention_backend')} {key} is {kind} backend; {model.name} uses {model.attention}")
    return size


def default_max_num_batched_tokens(
    gpu_memory_bytes: int | None, gpu_name: str | None, version: str, max_model_len: int | None = None
) -> tuple[int, str]:
    """`vllm serve`'s default scheduler token budget for the device (get_batch_defaults),
    capped at max_num_seqs x max_model_len as the engine args do for default settings."""
    if gpu_memory_bytes is None:
        tokens, seqs, why = 2048, 256, "vLLM serve default for an unknown GPU (2048); pass --gpu or --max-num-batched-tokens"
    else:
        name = (gpu_name or "").lower()
        if version == "0.33" and gpu_memory_bytes >= 160 * GIB:
            tokens, seqs, why = 16384, 1024, "vLLM 0.33 serve default for GPUs of >= 160 GiB"
        elif gpu_memory_bytes >= 70 * GIB and "a100" not in name:
            tokens, seqs, why = 8192, 1024, "vLLM serve default for GPUs of >= 70 GiB other than A100"
        else:
            tokens, seqs, why = 2048, 256, "vLLM serve default for A100 and GPUs under 70 GiB"
    if max_model_len is not None and seqs * max_model_len < tokens:
        return seqs * max_model_len, f"{why}, capped at max_num_seqs {seqs} x max_model_len {max_model_len}"
    return tokens, why


def max_concurrent_batches(pp: int, version: str, override: int | None) -> tuple[int, str]:
    """Batches in flight: 0.33 async scheduling with model runner V2 keeps pp + 1."""
    if override is not None:
        if override < 1:
            raise PlanError(f"{named('max_concurrent_batches')} must be a positive integer, got {override}")
        return override, "--max-concurrent-batches"
    if version == "0.20":
        return 1, "vLLM 0.20 reserves max_num_batched_tokens (no concurrency factor)"
    return pp + 1, "vLLM 0.33 default: async scheduling + model runner V2 -> pp + 1"
