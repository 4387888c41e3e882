"""Option types shared by every command, named as vLLM names them so values paste
between the two (``--tensor-parallel-size``/``-tp``, ``--kv-cache-dtype``, ...)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from kvcalc.errors import KvcalcError

Model = Annotated[str, typer.Argument(help="Preset name (kvcalc presets), path to config.json or its folder, or Hub repo id")]
Format = Annotated[str, typer.Option("--format", "-f", help="table | json | markdown")]
Units = Annotated[str, typer.Option("--units", help="iec (KiB/MiB/GiB, default) | si (KB/MB/GB)")]
Revision = Annotated[Optional[str], typer.Option("--revision", help="Hub revision (branch, tag or commit)")]

Tp = Annotated[int, typer.Option("--tp", "--tensor-parallel-size", "-tp", help="Tensor-parallel size")]
Pp = Annotated[int, typer.Option("--pp", "--pipeline-parallel-size", "-pp", help="Pipeline-parallel size")]
Dp = Annotated[int, typer.Option("--dp", "--data-parallel-size", "-dp", help="Data-parallel replicas (separate pools)")]
PpLayers = Annotated[
    Optional[str], typer.Option("--pp-layers", help="Explicit layers per stage, e.g. 15,16,15,15 (VLLM_PP_LAYER_PARTITION)")
]
GpusPerNode = Annotated[int, typer.Option("--gpus-per-node", help="GPUs per node, for local ranks")]

KvDtype = Annotated[
    str,
    typer.Option(
        "--kv-dtype",
        "--kv-cache-dtype",
        help="auto | bfloat16 | float16 | float32 | fp8 | fp8_e4m3 | fp8_e5m2 | fp8_inc | fp8_per_token_head | "
        "int8_per_token_head | fp8_ds_mla",
    ),
]
Dtype = Annotated[Optional[str], typer.Option("--dtype", help="Override the model dtype (auto | bfloat16 | float16 | float32)")]
BlockSize = Annotated[Optional[int], typer.Option("--block-size", help="Tokens per KV block (vLLM default 16)")]
MaxModelLen = Annotated[Optional[int], typer.Option("--max-model-len", help="Longest request (default: from the config)")]
EncoderTokens = Annotated[
    Optional[int], typer.Option("--encoder-tokens", help="Encoder positions held by cross-attention (encoder-decoder models)")
]
VllmVersion = Annotated[str, typer.Option("--vllm-version", help="Engine rules: 0.33 (current, default) | 0.20")]

Tokens = Annotated[Optional[int], typer.Option("--tokens", "-t", help="Cached tokens of one request (or of each with --batch)")]
Requests = Annotated[Optional[str], typer.Option("--requests", help="Comma-separated token counts, one per request: 17,32")]
Batch = Annotated[Optional[int], typer.Option("--batch", "-b", help="Number of requests of --tokens (or --prompt/--gen) each")]
Prompt = Annotated[Optional[int], typer.Option("--prompt", help="Prompt tokens (with --gen: caches prompt + gen - 1)")]
Gen = Annotated[Optional[int], typer.Option("--gen", help="Generated tokens")]
Continuation = Annotated[bool, typer.Option("--continuation", help="Keep the last token's KV for a follow-up turn (P + G)")]

Gpu = Annotated[Optional[str], typer.Option("--gpu", help="GPU from the catalog (kvcalc gpus): H100-80GB, H200, A100-80GB, ...")]
GpuMemory = Annotated[Optional[str], typer.Option("--gpu-memory", help="Total GPU memory: 80GiB, 79.1GiB, 80GB or bytes")]
GpuUtil = Annotated[
    Optional[float], typer.Option("--gpu-memory-utilization", "--gpu-util", help="Fraction of total memory vLLM may use (0.92)")
]
KvCacheMemory = Annotated[
    Optional[str], typer.Option("--kv-cache-memory", "--kv-cache-memory-bytes", help="KV pool per GPU, bypassing the budget")
]
WeightsBytes = Annotated[Optional[str], typer.Option("--weights-bytes", help="Weights of the whole model (overrides the estimate)")]
ActivationBytes = Annotated[Optional[str], typer.Option("--activation-bytes", help="Activation peak per GPU (overrides the estimate)")]
OverheadBytes = Annotated[Optional[str], typer.Option("--overhead-bytes", help="Non-torch memory per GPU: CUDA context, NCCL")]
CudagraphBytes = Annotated[Optional[str], typer.Option("--cudagraph-bytes", help="CUDA graph memory per GPU (0 with --enforce-eager)")]
MaxNumBatchedTokens = Annotated[
    Optional[int], typer.Option("--max-num-batched-tokens", help="Scheduler token budget (default: vLLM's serve default for the GPU)")
]
NumGpuBlocksOverride = Annotated[Optional[int], typer.Option("--num-gpu-blocks-override", help="Force the number of blocks")]
MaxConcurrentBatches = Annotated[
    Optional[int], typer.Option("--max-concurrent-batches", help="Batches in flight (0.33 default: pp + 1 with async scheduling)")
]
DisableHybrid = Annotated[
    bool, typer.Option("--disable-hybrid-kv-cache-manager", help="Allocate sliding/chunked layers as full attention")
]
AttentionBackend = Annotated[
    Optional[str], typer.Option("--attention-backend", help="Backend whose block size applies: FLASH_ATTN, FLASHMLA, CUTLASS_MLA, ...")
]


def check_format(fmt: str) -> str:
    f = fmt.strip().lower()
    if f in ("md",):
        f = "markdown"
    if f not in ("table", "json", "markdown"):
        raise KvcalcError(f"--format {fmt!r} is not known; valid: table, json, markdown")
    return f


def check_units(units: str) -> str:
    u = units.strip().lower()
    if u not in ("iec", "si"):
        raise KvcalcError(f"--units {units!r} is not known; valid: iec, si")
    return u


def emit(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
