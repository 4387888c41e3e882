"""Element types of the model and of the KV cache, with their storage size.

Our own table (no torch): ``--kv-cache-dtype`` names as vLLM spells them, the bytes
each element is stored in (vLLM ``STR_DTYPE_TO_TORCH_DTYPE``), and which vLLM lines
accept the name.
"""

from __future__ import annotations

from kvcalc.core.record import record


@record
class KVDtype:
    name: str
    bytes: int  # storage bytes per element
    # extra bytes per (token, kv head): inline fp32 scales of the *_per_token_head modes
    scale_bytes_per_head: int = 0
    # fixed bytes per token per MLA layer (packed DeepSeek formats)
    mla_token_bytes: int = 0
    mla_only: bool = False
    versions: tuple[str, ...] = ("0.33", "0.20")
    note: str = ""


MODEL_DTYPES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
}

# aliases found in config.json files and on command lines
DTYPE_ALIASES: dict[str, str] = {
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
}

KV_DTYPES: dict[str, KVDtype] = {
    d.name: d
    for d in (
        KVDtype("float32", 4, note="not a vLLM --kv-cache-dtype choice; reachable as auto with --dtype float32"),
        KVDtype("float16", 2),
        KVDtype("bfloat16", 2),
        KVDtype("fp8", 1, note="per-tensor scales: no bytes in the pool"),
        KVDtype("fp8_e4m3", 1, note="per-tensor scales: no bytes in the pool"),
        KVDtype("fp8_e5m2", 1, note="per-tensor scales: no bytes in the pool"),
        KVDtype("fp8_inc", 1),
        KVDtype(
            "fp8_per_token_head",
            1,
            scale_bytes_per_head=8,
            note="two fp32 scales per (token, kv head) inside the page (Triton backend)",
        ),
        KVDtype(
            "int8_per_token_head",
            1,
            scale_bytes_per_head=8,
            note="two fp32 scales per (token, kv head) inside the page (Triton backend)",
        ),
        KVDtype(
            "fp8_ds_mla",
            1,
            mla_token_bytes=656,
            mla_only=True,
            note="DeepSeek packed MLA: 656 B per token per layer (512 fp8 + 16 scales + 128 bf16 rope)",
        ),
    )
}

KV_DTYPE_CHOICES = ("auto", *KV_DTYPES)


def normalize_model_dtype(name: str) -> str | None:
    """Map a config/flag dtype spelling to float32/float16/bfloat16, or None."""
    n = str(name).strip().lower().removeprefix("torch.")
    n = DTYPE_ALIASES.get(n, n)
    return n if n in MODEL_DTYPES else None
