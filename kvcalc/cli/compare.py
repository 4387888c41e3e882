"""`kvcalc compare`: attention variants, models side by side, and sweeps over list flags."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvcalc.cli import options as o

# list-valued versions of the shared flags (same names and aliases; parsed by kvcalc.app.compare)
Models = Annotated[
    list[str], typer.Argument(help="One or more models: preset names, config.json paths or Hub repo ids")
]
TpList = Annotated[Optional[str], typer.Option("--tp", "--tensor-parallel-size", "-tp", help="TP size(s): 1,2,4,8")]
PpList = Annotated[Optional[str], typer.Option("--pp", "--pipeline-parallel-size", "-pp", help="PP size(s): 1,2")]
DpList = Annotated[Optional[str], typer.Option("--dp", "--data-parallel-size", "-dp", help="DP replicas: 1,2")]
KvDtypeList = Annotated[
    Optional[str], typer.Option("--kv-dtype", "--kv-cache-dtype", help="KV cache dtype(s): auto,bfloat16,fp8")
]
BlockSizeList = Annotated[Optional[str], typer.Option("--block-size", help="Tokens per KV block: 16,32")]
TokensList = Annotated[
    Optional[str], typer.Option("--tokens", "-t", help="Cached tokens of one request (or each with --batch): 4096,32768")
]
BatchList = Annotated[Optional[str], typer.Option("--batch", "-b", help="Number of requests of --tokens each: 1,8")]
MaxModelLenList = Annotated[Optional[str], typer.Option("--max-model-len", help="Longest request(s): 8192,32768")]
GpuList = Annotated[Optional[str], typer.Option("--gpu", help="GPU(s) from the catalog: H100-80GB,H200")]
Attention = Annotated[
    Optional[str],
    typer.Option(
        "--attention",
        help="Hypothetical variants changing only N_kv: mha (N_kv = query heads), gqa (the model's own), "
        "gqa:N (N KV heads, a divisor of the query heads), mqa (N_kv = 1); e.g. mha,gqa,mqa",
    ),
]
Sort = Annotated[
    Optional[str],
    typer.Option(
        "--sort",
        help="Order rows best first by: model, bytes_per_token, bytes_per_token_per_rank, effective_bytes, "
        "block_rounded_bytes, pool_tokens, max_concurrency (default: as given)",
    ),
]


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)


def compare(
    models: Models,
    attention: Attention = None,
    tokens: TokensList = None,
    requests: o.Requests = None,
    batch: BatchList = None,
    prompt: o.Prompt = None,
    gen: o.Gen = None,
    continuation: o.Continuation = False,
    tp: TpList = None,
    pp: PpList = None,
    dp: DpList = None,
    pp_layers: o.PpLayers = None,
    gpus_per_node: o.GpusPerNode = 8,
    kv_dtype: KvDtypeList = None,
    dtype: o.Dtype = None,
    block_size: BlockSizeList = None,
    max_model_len: MaxModelLenList = None,
    encoder_tokens: o.EncoderTokens = None,
    vllm_version: o.VllmVersion = "0.33",
    gpu: GpuList = None,
    gpu_memory: o.GpuMemory = None,
    gpu_memory_utilization: o.GpuUtil = None,
    kv_cache_memory: o.KvCacheMemory = None,
    weights_bytes: o.WeightsBytes = None,
    activation_bytes: o.ActivationBytes = None,
    overhead_bytes: o.OverheadBytes = None,
    cudagraph_bytes: o.CudagraphBytes = None,
    max_num_batched_tokens: o.MaxNumBatchedTokens = None,
    num_gpu_blocks_override: o.NumGpuBlocksOverride = None,
    max_concurrent_batches: o.MaxConcurrentBatches = None,
    disable_hybrid_kv_cache_manager: o.DisableHybrid = False,
    attention_backend: o.AttentionBackend = None,
    sort: Sort = None,
    revision: o.Revision = None,
    format: o.Format = "table",
    units: o.Units = "iec",
) -> None:
    """Compare attention variants (MHA/GQA/MQA), several models, or a sweep over list flags, one row each."""
    from kvcalc.app.compare import SWEEP_FLAGS, ModelInput, check_sort, parse_attention, parse_list
    from kvcalc.app.compare import compare as build
    from kvcalc.render import render, to_rich
    from kvcalc.render.compare import compare_document, compare_payload, table_width
    from kvcalc.app.service import Settings
    from kvcalc.sources.resolve import resolve

    fmt = o.check_format(format)
    u = o.check_units(units)
    flags = dict(locals())
    sweeps = {name: parse_list(flags[name], flag, kind) for name, (flag, kind) in SWEEP_FLAGS.items()}
    variants = parse_attention(attention)
    sort_key = check_sort(sort)
    base = Settings(**{k: v for k, v in flags.items() if k in Settings.names() and k not in SWEEP_FLAGS})
    inputs = []
    for name in models:
        resolved = resolve(name, revision=revision)
        inputs.append(ModelInput(name, resolved.spec, resolved.checkpoint))
    result = build(inputs, base, sweeps, variants, sort_key)
    if fmt == "table":
        doc = compare_document(result, u)
        o.emit(to_rich(doc, width=table_width(doc)))
    else:
        o.emit(render(fmt, compare_payload(result), None if fmt == "json" else compare_document(result, u)))
