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
    from kvcalc.app.lifecycle import lifecycles
    from kvcalc.core.units import parse_size
    from kvcalc.render import lifecycle as rl
    from kvcalc.render import render

    fmt = o.check_format(format)
    u = o.check_units(units)
    _check(beams, spec_tokens, spec_lookahead, prefix_cache, offload, settings)
    cpu_bytes = parse_size(offload, "--offload") if offload is not None else None
    resolved = o.resolve(model, revision=revision)
    lcs = lifecycles(
        resolved.spec, settings, beams=beams, spec_tokens=spec_tokens, spec_lookahead=spec_lookahead,
        prefix_cache=prefix_cache, offload_bytes=cpu_bytes, checkpoint=resolved.checkpoint,
    )
    o.emit(render(fmt, rl.lifecycle_payload(lcs), None if fmt == "json" else rl.lifecycle_document(lcs, u)))
