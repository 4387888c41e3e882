"""`kvcalc probe`: check kvcalc's formulas against this machine (exit 0 agree, 1 disagree, 3 cannot run)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from kvcalc.cli import options as o

if TYPE_CHECKING:
    from kvcalc.app.service import Settings

Device = Annotated[str, typer.Option("--device", help="auto (CUDA when visible, else CPU) | cpu | cuda | cuda:N")]
Layers = Annotated[
    Optional[int],
    typer.Option("--layers", help="Probe only the first N cache layers of the rank (allocation) / build N layers "
                 "(--model-cache, default 2); the whole rank is predicted from them"),
]
Blocks = Annotated[Optional[int], typer.Option("--blocks", help="KV blocks to allocate (default: --tokens / block size + the null block)")]
ProbeTokens = Annotated[Optional[int], typer.Option("--tokens", "-t", help="Tokens the allocated pool must hold (default 4096)")]
PpRank = Annotated[Optional[int], typer.Option("--pp-rank", help="PP stage to probe (default: the one with most bytes per block)")]
ModelCache = Annotated[bool, typer.Option("--model-cache", help="Build the model in transformers and check its own cache")]
Engine = Annotated[Optional[str], typer.Option("--engine", help="Start this engine with dummy weights and check its pool: vllm")]
FromLog = Annotated[Optional[str], typer.Option("--from-vllm-log", help="Check the figures of a vLLM start-up log file")]
Alloc = Annotated[bool, typer.Option("--alloc", help="Also run the allocation check next to another check")]
ProbeTp = Annotated[Optional[int], typer.Option("--tp", "--tensor-parallel-size", "-tp", help="Tensor-parallel size")]
ProbePp = Annotated[Optional[int], typer.Option("--pp", "--pipeline-parallel-size", "-pp", help="Pipeline-parallel size")]
ProbeKvDtype = Annotated[Optional[str], typer.Option("--kv-dtype", "--kv-cache-dtype", help="auto | bfloat16 | float16 | fp8 | ...")]
ProbeVersion = Annotated[
    Optional[str],
    typer.Option("--vllm-version", help="Engine rules: 0.33 | 0.20 (with --from-vllm-log: inferred from the log if not given)"),
]


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)


def probe(
    model: o.Model,
    device: Device = "auto",
    layers: Layers = None,
    blocks: Blocks = None,
    tokens: ProbeTokens = None,
    pp_rank: PpRank = None,
    model_cache: ModelCache = False,
    prompt: o.Prompt = None,
    gen: o.Gen = None,
    engine: Engine = None,
    from_vllm_log: FromLog = None,
    alloc: Alloc = False,
    tp: ProbeTp = None,
    pp: ProbePp = None,
    kv_dtype: ProbeKvDtype = None,
    dtype: o.Dtype = None,
    block_size: o.BlockSize = None,
    max_model_len: o.MaxModelLen = None,
    vllm_version: ProbeVersion = None,
    gpu_memory_utilization: o.GpuUtil = None,
    kv_cache_memory: o.KvCacheMemory = None,
    max_num_batched_tokens: o.MaxNumBatchedTokens = None,
    max_concurrent_batches: o.MaxConcurrentBatches = None,
    disable_hybrid_kv_cache_manager: o.DisableHybrid = False,
    revision: o.Revision = None,
    format: o.Format = "table",
    units: o.Units = "iec",
) -> None:
    """Measure what the formulas predict: a KV pool allocated as vLLM lays it out (CPU or CUDA),
    a transformers model's own cache (--model-cache), vLLM itself (--engine vllm), or a vLLM
    start-up log (--from-vllm-log). Exit 0 all agree, 1 a disagreement, 3 the probe cannot run here."""
    from kvcalc.app.probe_report import ProbeReport
    from kvcalc.app.settings import MAX_PARALLEL, MAX_TOKENS, check_bounds
    from kvcalc.render.probe import render_probe
    from kvcalc.sources.resolve import resolve

    fmt = o.check_format(format)
    u = o.check_units(units)
    o.bounded(blocks, "--blocks", MAX_TOKENS)
    o.bounded(tokens, "--tokens", MAX_TOKENS)
    o.bounded(pp_rank, "--pp-rank", MAX_PARALLEL)
    o.bounded(layers, "--layers", MAX_PARALLEL)
    settings = _settings(
        tp=tp, pp=pp, kv_dtype=kv_dtype, dtype=dtype, block_size=block_size, max_model_len=max_model_len,
        vllm_version=vllm_version, gpu_memory_utilization=gpu_memory_utilization, kv_cache_memory=kv_cache_memory,
        max_num_batched_tokens=max_num_batched_tokens, max_concurrent_batches=max_concurrent_batches,
        disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
    )
    check_bounds(settings)  # every setting bounded as for kvcalc size, whichever check uses it
    resolved = resolve(model, revision=revision)
    report = ProbeReport(resolved.spec.name, resolved.source)
    if from_vllm_log:
        from kvcalc.probe.vllm_log import probe_log

        report.checks.append(
            probe_log(resolved, settings, from_vllm_log, vllm_version_given=vllm_version, tp_given=tp is not None,
                      pp_given=pp is not None, kv_dtype_given=kv_dtype is not None)
        )
    if alloc or not (model_cache or engine or from_vllm_log):
        from kvcalc.probe.alloc import probe_allocation

        report.checks.append(
            probe_allocation(resolved, settings, device=device, layers=layers, blocks=blocks, tokens=tokens,
                             pp_rank=pp_rank)
        )
    if model_cache:
        from kvcalc.probe.model_cache import probe_model_cache

        report.checks.append(
            probe_model_cache(resolved, settings, layers=layers, prompt=prompt, gen=gen, device=device)
        )
    if engine:
        from kvcalc.probe.engine import probe_engine

        report.checks.append(probe_engine(resolved, settings, engine=engine))
    o.emit(render_probe(fmt, report, u))
    if report.exit_code:
        raise typer.Exit(report.exit_code)


def _settings(*, tp: int | None, pp: int | None, kv_dtype: str | None, vllm_version: str | None,
              **given: Any) -> Settings:
    """The engine settings of a probe: TP/PP 1, the KV dtype auto and vLLM 0.33 rules unless given."""
    from kvcalc.app.service import Settings

    return Settings(  # type: ignore[call-arg]  # a kvcalc.core.record class: mypy sees no __init__ fields
        tp=1 if tp is None else tp,
        pp=1 if pp is None else pp,
        kv_dtype=kv_dtype or "auto",
        vllm_version=vllm_version or "0.33",
        **given,
    )
