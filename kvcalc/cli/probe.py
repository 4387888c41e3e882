"""`kvcalc probe`: check kvcalc's formulas against this machine (exit 0 agree, 1 disagree, 3 cannot run)."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from kvcalc.app.settings import Settings
from kvcalc.cli import options as o

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
FromSglangLog = Annotated[Optional[str], typer.Option("--from-sglang-log", help="Check the figures of an SGLang launch log file")]
FromAnyLog = Annotated[Optional[str], typer.Option("--from-log", help="Check a vLLM or SGLang start-up log (the engine is read from the log)")]
Alloc = Annotated[bool, typer.Option("--alloc", help="Also run the allocation check next to another check")]


def register(app: typer.Typer) -> None:
    o.command(app, "probe", settings=PROBE, unset=FROM_LOG)(probe)


PROBE = (
    "tp", "pp", "kv_dtype", "dtype", "block_size", "max_model_len", "vllm_version", "sglang_version",
    "gpu_memory_utilization", "mem_fraction_static", "kv_cache_memory", "max_num_batched_tokens",
    "max_concurrent_batches", "disable_hybrid_kv_cache_manager", "gpu", "gpu_memory", "max_num_seqs", "sampler",
    "prompt", "gen", "speculative_config",
)
# given or read from the log: without the flag, a log check takes the log's figure
FROM_LOG = ("tp", "pp", "kv_dtype", "vllm_version", "sglang_version", "max_model_len", "block_size")


def probe(
    model: o.Model,
    device: Device = "auto",
    layers: Layers = None,
    blocks: Blocks = None,
    tokens: ProbeTokens = None,
    pp_rank: PpRank = None,
    model_cache: ModelCache = False,
    engine: Engine = None,
    from_vllm_log: FromLog = None, from_sglang_log: FromSglangLog = None, from_log: FromAnyLog = None,
    alloc: Alloc = False,
    settings: Settings = o.FROM_FLAGS,
    given: frozenset = o.FROM_FLAGS,
    revision: o.Revision = None,
    format: o.Format = "table",
    units: o.Units = "iec",
) -> None:
    """Measure what the formulas predict: a KV pool allocated as vLLM lays it out (CPU or CUDA),
    a transformers model's own cache (--model-cache), vLLM itself (--engine vllm), or a vLLM
    or SGLang start-up log (--from-vllm-log, --from-sglang-log, --from-log). Exit 0 all agree, 1 a disagreement, 3 the probe cannot run here."""
    from kvcalc.app.probe_report import ProbeReport
    from kvcalc.app.settings import MAX_PARALLEL, MAX_TOKENS, check_bounds
    from kvcalc.render.probe import render_probe

    fmt = o.check_format(format)
    u = o.check_units(units)
    o.bounded(blocks, "--blocks", MAX_TOKENS)
    o.bounded(tokens, "--tokens", MAX_TOKENS)
    o.bounded(pp_rank, "--pp-rank", MAX_PARALLEL)
    o.bounded(layers, "--layers", MAX_PARALLEL)
    check_bounds(settings)  # every setting bounded as for kvcalc size, whichever check uses it
    if from_log:
        from_vllm_log, from_sglang_log = _which_log(from_log, from_vllm_log, from_sglang_log)
    resolved = o.resolve(model, revision=revision)
    report = ProbeReport(resolved.spec.name, resolved.source)
    if from_sglang_log:
        report.checks.append(_sglang_log_check(resolved, settings, from_sglang_log, given))
    if from_vllm_log:
        from kvcalc.probe.vllm_log import probe_log

        with o.status("probe: reading the vLLM log"):
            report.checks.extend(
                probe_log(resolved, settings, from_vllm_log,
                          vllm_version_given=settings.vllm_version if "vllm_version" in given else None,
                          tp_given="tp" in given, pp_given="pp" in given, kv_dtype_given="kv_dtype" in given)
            )
    report.checks.extend(_device_checks(
        resolved, settings, alloc=alloc or not (model_cache or engine or from_vllm_log or from_sglang_log),
        model_cache=model_cache, engine=engine, device=device, layers=layers, blocks=blocks, tokens=tokens,
        pp_rank=pp_rank, prompt=settings.prompt, gen=settings.gen,
    ))
    o.emit(render_probe(fmt, report, u))
    if report.exit_code:
        raise typer.Exit(report.exit_code)


def _device_checks(resolved: Any, settings: Settings, *, alloc: bool, model_cache: bool, engine: str | None,
                   device: str, layers: Any, blocks: int | None, tokens: int | None, pp_rank: int | None,
                   prompt: int | None, gen: int | None) -> list[Any]:
    """The checks that run something: the pool allocated, the model's own cache, the engine."""
    checks = []
    if alloc:
        from kvcalc.probe.alloc import probe_allocation

        with o.status("probe: allocating the KV cache tensors"):
            checks.append(probe_allocation(resolved, settings, device=device, layers=layers, blocks=blocks,
                                           tokens=tokens, pp_rank=pp_rank))
    if model_cache:
        from kvcalc.probe.model_cache import probe_model_cache

        with o.status("probe: running the model's cache (transformers)"):
            checks.append(probe_model_cache(resolved, settings, layers=layers, prompt=prompt, gen=gen, device=device))
    if engine:
        from kvcalc.probe.engine import probe_engine

        with o.status("probe: starting vLLM"):
            checks.append(probe_engine(resolved, settings, engine=engine))
    return checks


def _sglang_log_check(resolved: Any, settings: Settings, path: str, given: frozenset) -> Any:
    """The SGLang log check; the flags given on the command line win over the log's server_args."""
    from kvcalc.probe.sglang_log import probe_sglang_log

    version = settings.sglang_version if "sglang_version" in given else None
    flags = {k: k in given for k in ("tp", "kv_dtype", "max_model_len", "block_size", "mem_fraction_static")}
    return probe_sglang_log(resolved, settings, path, sglang_version_given=version, given=flags)


def _which_log(path: str, vllm: str | None, sglang: str | None) -> tuple[str | None, str | None]:
    """--from-log: an SGLang launch log when it has SGLang's own start-up lines, else a vLLM one."""
    from pathlib import Path

    from kvcalc.errors import KvcalcError
    from kvcalc.probe.sglang_log import looks_like_sglang

    if vllm or sglang:
        raise KvcalcError("--from-log replaces --from-vllm-log / --from-sglang-log: give one of them")
    from kvcalc.sources.files import read_limited

    try:  # bounded as the log checks read: a FIFO or /dev/zero is no log
        text = read_limited(Path(path).expanduser(), 32 << 20, "--from-log").decode("utf-8", errors="replace")
    except (OSError, RuntimeError) as exc:
        raise KvcalcError(f"--from-log: cannot read {path!r}: {getattr(exc, 'strerror', None) or exc}") from None
    return (None, path) if looks_like_sglang(text) else (path, None)
