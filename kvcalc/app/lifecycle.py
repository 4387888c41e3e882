"""`kvcalc lifecycle`: beams, speculative tokens, prefix caching and a CPU tier, as capacity
(no formatting: kvcalc.render.lifecycle turns a ``Lifecycles`` into JSON and tables)."""

from __future__ import annotations

from typing import Any

from kvcalc.app.service import SizeResult, evaluate
from kvcalc.app.settings import Settings
from kvcalc.core import lifecycle as lc
from kvcalc.core.model import ModelSpec
from kvcalc.core.record import record
from kvcalc.errors import KvcalcError, named


@record
class Lifecycles:
    result: SizeResult
    beams: tuple[lc.SharingReport, dict[str, Any]] | None = None
    spec: lc.SpecReport | None = None
    prefix: tuple[lc.SharingReport, dict[str, Any]] | None = None
    offload: lc.OffloadReport | None = None


def lifecycles(
    model: ModelSpec,
    settings: Settings,
    *,
    beams: int | None = None,
    spec_tokens: int | None = None,
    spec_lookahead: int = 0,
    prefix_cache: int | None = None,
    offload_bytes: int | None = None,
    checkpoint: dict | None = None,
) -> Lifecycles:
    if beams is None and spec_tokens is None and prefix_cache is None and offload_bytes is None:
        raise KvcalcError("give at least one of --beams N, --spec-tokens K, --prefix-cache HIT, --offload SIZE")
    if beams is not None and (settings.prompt is None or settings.gen is None):
        raise KvcalcError(
            f"--beams needs {named('prompt')} and {named('gen')}: the beams fork after the prompt and grow by the "
            "generated tokens"
        )
    result = evaluate(model, settings, checkpoint=checkpoint)
    fp = result.footprint
    stages, tp = fp.stages, fp.plan.tp
    reqs = list(fp.traffic.requests)
    out: dict[str, Any] = {}
    if beams is not None:
        prompt = settings.prompt
        assert prompt is not None  # checked above
        r = lc.beams(stages, tp=tp, prompt=prompt, tokens=reqs[0], width=beams, copies=len(reqs))
        out["beams"] = (r, {"width": beams, "prompt": prompt, "tokens": reqs[0]})
    if spec_tokens is not None:
        out["spec"] = lc.speculative(
            stages, tp=tp, requests=reqs, spec_tokens=spec_tokens, lookahead=spec_lookahead,
            max_model_len=result.max_model_len,
        )
    if prefix_cache is not None:
        prompts = [settings.prompt] * len(reqs) if settings.prompt is not None else reqs
        r = lc.prefix_cache(stages, tp=tp, hit=prefix_cache, requests=reqs, prompts=prompts)
        out["prefix"] = (r, {"hit": prefix_cache, "requests": len(reqs)})
    if offload_bytes is not None:
        pool_tokens = result.pool.pool_tokens if result.pool is not None else None
        out["offload"] = lc.offload(
            stages, tp=tp, cpu_bytes=offload_bytes, block_size=fp.cache.block_size, gpu_pool_tokens=pool_tokens
        )
    return Lifecycles(result, **out)
