"""`kvcalc fit`: search deployments (TP x PP x kv dtype, DP replicas as needed) that serve a
target concurrency at a max_model_len on a given GPU, and say why the others fail."""

from __future__ import annotations

import math

from kvcalc.app.service import Settings, check_settings, evaluate
from kvcalc.app.settings import MAX_WORLD_SIZE
from kvcalc.core.model import ModelSpec
from kvcalc.core.record import record
from kvcalc.errors import KvcalcError, named


@record
class Candidate:
    tp: int
    pp: int
    kv_dtype: str
    ok: bool
    reason: str
    dp: int = 0
    gpus: int = 0
    concurrency_per_replica: float = 0.0
    pool_tokens: int = 0
    num_blocks: int = 0
    kv_cache_memory_bytes: int = 0
    engine: str = "vllm"

    @property
    def total_concurrency(self) -> float:
        return self.concurrency_per_replica * self.dp


def powers_of_two(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def search(
    model: ModelSpec,
    base: Settings,
    *,
    concurrency: float,
    max_gpus: int,
    kv_dtypes: list[str],
    allow_dp: bool = True,
    checkpoint: dict | None = None,
    engines: list[str] | None = None,
) -> list[Candidate]:
    if not (concurrency > 0) or math.isinf(concurrency):
        raise KvcalcError(f"--concurrency must be a positive number, got {concurrency!r}")
    if max_gpus < 1:
        raise KvcalcError(f"--max-gpus must be a positive integer, got {max_gpus}")
    if max_gpus > MAX_WORLD_SIZE:
        shown = str(max_gpus) if len(str(max_gpus)) <= 24 else f"{str(max_gpus)[:12]}... ({len(str(max_gpus))} digits)"
        raise KvcalcError(f"--max-gpus {shown} is beyond what kvcalc sizes (at most {MAX_WORLD_SIZE:,} GPUs)")
    if not base.has_pool:
        raise KvcalcError(f"kvcalc fit needs {named('gpu')}, {named('gpu_memory')} or {named('kv_cache_memory')}")
    # a wrong flag is one error (exit 2), not every plan rejected for it (exit 0)
    check_settings(model, base.with_(tokens=0))
    for kv in kv_dtypes:
        check_settings(model, base.with_(tokens=0, kv_dtype=kv))
    out: list[Candidate] = []
    for engine in engines or [base.engine]:
        out.extend(_search_engine(model, base.with_(engine=engine), concurrency, max_gpus, kv_dtypes, allow_dp, checkpoint))
    ok = sorted(
        (c for c in out if c.ok),
        key=lambda c: (c.gpus, -(c.concurrency_per_replica * c.dp)),
    )
    return ok + [c for c in out if not c.ok]


def _search_engine(
    model: ModelSpec, base: Settings, concurrency: float, max_gpus: int, kv_dtypes: list[str], allow_dp: bool,
    checkpoint: dict | None,
) -> list[Candidate]:
    """Every TP x PP x kv dtype under one engine's rules."""
    out: list[Candidate] = []
    for kv in kv_dtypes:
        for tp in powers_of_two(max_gpus):
            for pp in powers_of_two(max_gpus // tp):
                s = base.with_(tp=tp, pp=pp, kv_dtype=kv, tokens=0)
                engine = str(base.engine)
                try:
                    r = evaluate(model, s, checkpoint=checkpoint)
                except KvcalcError as exc:
                    out.append(Candidate(tp, pp, kv, False, exc.message, engine=engine))  # type: ignore[call-arg]
                    continue
                pool = r.pool
                if pool is None:
                    out.append(Candidate(tp, pp, kv, False, "no pool figures for this model", engine=engine))  # type: ignore[call-arg]
                    continue
                common = dict(
                    engine=engine,
                    concurrency_per_replica=pool.max_concurrency,
                    pool_tokens=pool.pool_tokens,
                    num_blocks=pool.num_blocks,
                    kv_cache_memory_bytes=min(pool.inputs.available_per_stage),
                )
                if not pool.fits:
                    out.append(Candidate(tp, pp, kv, False, "pool too small: " + (pool.error or ""), **common))
                    continue
                dp = max(1, math.ceil(concurrency / pool.max_concurrency)) if pool.max_concurrency > 0 else 0
                gpus = tp * pp * dp
                if dp > 1 and not allow_dp:
                    out.append(Candidate(tp, pp, kv, False, f"pool too small: {pool.max_concurrency:.2f}x < {concurrency}x", 1, tp * pp, **common))
                elif dp == 0 or gpus > max_gpus:
                    out.append(
                        Candidate(
                            tp, pp, kv, False,
                            f"pool too small: {pool.max_concurrency:.2f}x per replica needs {dp} replicas = {gpus} GPUs > --max-gpus {max_gpus}",
                            dp, gpus, **common,
                        )
                    )
                else:
                    why = f"{pool.max_concurrency:.2f}x per replica" + (f" x {dp} replicas" if dp > 1 else "")
                    out.append(Candidate(tp, pp, kv, True, why, dp, gpus, **common))
    return out
