"""`kvcalc lifecycle`: beams, speculative tokens, prefix caching and a CPU tier, as capacity."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvcalc.app.settings import Settings
from kvcalc.cli import options as o

Beams = Annotated[Optional[int], typer.Option("--beams", help="Beam width: the prompt's full blocks shared, each beam's own blocks after the fork (needs --prompt/--gen)")]
SpecTokens = Annotated[Optional[int], typer.Option("--spec-tokens", "--num-speculative-tokens", help="Draft tokens verified per step: K temporary slots per request")]
SpecLookahead = Annotated[int, typer.Option("--spec-lookahead", help="Extra slots a drafter with its own KV writes (EAGLE / draft model: K; n-gram: 0)")]
PrefixCache = Annotated[Optional[int], typer.Option("--prefix-cache", help="Tokens of a prefix common to every request (automatic prefix caching)")]
Offload = Annotated[Optional[str], typer.Option("--offload", help="CPU tier per replica, summed over its ranks: 64GiB, 100GB or bytes (vLLM's --kv-offloading-size 64 means 64GiB)")]


LIFECYCLE = (
    "tokens", "requests", "batch", "prompt", "gen", "continuation", "tp", "pp", "dp", "pp_layers", "kv_dtype", "dtype",
    "block_size", "max_model_len", "vllm_version", "gpu", "gpu_memory", "gpu_memory_utilization", "kv_cache_memory",
    "num_gpu_blocks_override",
)


def register(app: typer.Typer) -> None:
    o.command(app, "lifecycle", settings=LIFECYCLE)(lifecycle)


def _check(beams: int | None, spec_tokens: int | None, spec_lookahead: int, prefix_cache: int | None,
           offload: str | None, settings: Settings) -> None:
    """The options' own rules and bounds (kvcalc.app.settings), before anything is resolved."""
    from kvcalc.app.settings import MAX_REQUESTS, MAX_TOKENS
    from kvcalc.errors import KvcalcError

    o.bounded(beams, "--beams", MAX_REQUESTS)
    o.bounded(spec_tokens, "--spec-tokens", MAX_TOKENS)
    o.bounded(spec_lookahead, "--spec-lookahead", MAX_TOKENS)
    o.bounded(prefix_cache, "--prefix-cache", MAX_TOKENS)
    if beams is None and spec_tokens is None and prefix_cache is None and offload is None:
        raise KvcalcError("give at least one of --beams N, --spec-tokens K, --prefix-cache HIT, --offload SIZE")
    if beams is not None and (settings.prompt is None or settings.gen is None):
        raise KvcalcError("--beams needs --prompt and --gen: the beams fork after the prompt and grow by the generated tokens")


def lifecycle(
    model: o.Model,
    beams: Beams = None,
    spec_tokens: SpecTokens = None,
    spec_lookahead: SpecLookahead = 0,
    prefix_cache: PrefixCache = None,
    offload: Offload = None,
    settings: Settings = o.FROM_FLAGS,
    revision: o.Revision = None,
    format: o.Format = "table",
    units: o.Units = "iec",
) -> None:
    """Special decodings as capacity: --beams, --spec-tokens, --prefix-cache, --offload (per rank, per replica)."""
    from kvcalc.app.service import evaluate
    from kvcalc.core import lifecycle as lc
    from kvcalc.core.units import parse_size
    from kvcalc.render import lifecycle as rl
    from kvcalc.render import render
    from kvcalc.sources.resolve import resolve

    fmt = o.check_format(format)
    u = o.check_units(units)
    _check(beams, spec_tokens, spec_lookahead, prefix_cache, offload, settings)
    cpu_bytes = parse_size(offload, "--offload") if offload is not None else None
    resolved = resolve(model, revision=revision)
    result = evaluate(resolved.spec, settings, checkpoint=resolved.checkpoint)
    fp = result.footprint
    stages = fp.stages
    reqs = list(fp.traffic.requests)
    payload: dict = {
        "model": fp.model.name,
        "source": fp.model.source,
        "kv_dtype": fp.cache.kv_dtype.name,
        "block_size": fp.cache.block_size,
        "max_model_len": result.max_model_len,
        "parallel": {"tp": fp.plan.tp, "pp": fp.plan.pp, "dp": fp.plan.dp},
        "traffic": fp.traffic.description,
        "requests": reqs,
    }
    beam_part = spec_part = prefix_part = off_part = None
    if beams is not None:
        prompt = settings.prompt
        assert prompt is not None  # checked above
        info = {"width": beams, "prompt": prompt, "tokens": reqs[0]}
        r = lc.beams(stages, tp=fp.plan.tp, prompt=prompt, tokens=reqs[0], width=beams, copies=len(reqs))
        payload["beams"] = rl.sharing_payload(r, info)
        beam_part = (r, info)
    if spec_tokens is not None:
        spec_part = lc.speculative(
            stages, tp=fp.plan.tp, requests=reqs, spec_tokens=spec_tokens, lookahead=spec_lookahead,
            max_model_len=result.max_model_len,
        )
        payload["spec_decode"] = rl.spec_payload(spec_part)
    if prefix_cache is not None:
        prompts = [settings.prompt] * len(reqs) if settings.prompt is not None else reqs
        r = lc.prefix_cache(stages, tp=fp.plan.tp, hit=prefix_cache, requests=reqs, prompts=prompts)
        info = {"hit": prefix_cache, "requests": len(reqs)}
        payload["prefix_cache"] = rl.sharing_payload(r, info)
        prefix_part = (r, info)
    if cpu_bytes is not None:
        pool_tokens = None
        if result.pool is not None:
            pool_tokens = result.pool.pool_tokens
        off_part = lc.offload(stages, tp=fp.plan.tp, cpu_bytes=cpu_bytes, block_size=fp.cache.block_size,
                              gpu_pool_tokens=pool_tokens)
        payload["offload"] = rl.offload_payload(off_part)
    payload["notes"] = list(result.notes)
    facts = [
        ("model", f"{fp.model.name} ({fp.model.attention}, {fp.model.num_layers} layers); source: {fp.model.source}"),
        ("plan", f"TP {fp.plan.tp} x PP {fp.plan.pp} x DP {fp.plan.dp}; block size {fp.cache.block_size}; "
                 f"kv dtype {fp.cache.kv_dtype.name}"),
        ("traffic", fp.traffic.description),
    ]
    doc = rl.lifecycle_document(
        f"Cache lifecycles of {fp.model.name}", facts, beam_part, spec_part, prefix_part, off_part, list(result.notes), u
    )
    o.emit(render(fmt, payload, None if fmt == "json" else doc))
