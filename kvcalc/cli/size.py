"""`kvcalc size`."""

import typer

from kvcalc.cli import options as o


def register(app: typer.Typer) -> None:
    app.command("size")(size)

def settings_from_flags(**flags):  # noqa: ANN001, ANN201 - the flag names are the Settings names
    from kvcalc.app.service import Settings

    return Settings(**{k: v for k, v in flags.items() if k in Settings.names()})

def size(
    model: o.Model,
    tokens: o.Tokens = None,
    requests: o.Requests = None,
    batch: o.Batch = None,
    prompt: o.Prompt = None,
    gen: o.Gen = None,
    continuation: o.Continuation = False,
    tp: o.Tp = 1,
    pp: o.Pp = 1,
    dp: o.Dp = 1,
    pp_layers: o.PpLayers = None,
    gpus_per_node: o.GpusPerNode = 8,
    kv_dtype: o.KvDtype = "auto",
    dtype: o.Dtype = None,
    block_size: o.BlockSize = None,
    max_model_len: o.MaxModelLen = None,
    encoder_tokens: o.EncoderTokens = None,
    vllm_version: o.VllmVersion = "0.33",
    gpu: o.Gpu = None,
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
    revision: o.Revision = None,
    format: o.Format = "table",
    units: o.Units = "iec",
) -> None:
    """Bytes per token, per request, per rank and per replica; the KV pool when a GPU is given."""
    from kvcalc.render import render
    from kvcalc.render.size import size_document, size_payload
    from kvcalc.app.service import evaluate
    from kvcalc.sources.resolve import resolve

    fmt = o.check_format(format)
    u = o.check_units(units)
    settings = settings_from_flags(**locals())
    resolved = resolve(model, revision=revision)
    result = evaluate(resolved.spec, settings, checkpoint=resolved.checkpoint)
    o.emit(render(fmt, size_payload(result), None if fmt == "json" else size_document(result, u)))
