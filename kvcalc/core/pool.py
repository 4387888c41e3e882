"""The KV pool, the seed's third measure, computed the way vLLM does at start-up.

Mirrors vLLM 0.33 ``v1/core/kv_cache_planning.py`` (grouping, bytes per block, blocks per
worker and their minimum, the fit check with the null block, the estimated max length)
and ``kv_cache_utils.py`` (max concurrency, the token figure), with the 0.20 line's
differences where they change a number. Pure: no I/O.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from kvcalc.core.footprint import CacheSettings, stage_specs
from kvcalc.core.grouping import Group, _promote_local, _unify_page_size, group_layers
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan
from kvcalc.core.record import field, record, replace
from kvcalc.core.specs import CacheSpec, MambaSpec, cdiv
from kvcalc.errors import PlanError

__all__ = ["Group", "_promote_local", "_unify_page_size", "group_layers"]  # grouping: kvcalc.core.grouping

GIB = 1 << 30
DOCS = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"


# ---------------------------------------------------------------- block size of hybrids


def hybrid_block_size(model: ModelSpec, tp: int, cache: CacheSettings) -> tuple[int, int]:
    """vLLM ``Platform._align_hybrid_block_size`` for attention + mamba models.

    Returns (attention block size, mamba page padded to match, or 0). The attention block
    size is raised so one attention page holds at least one mamba state page:
    ``align * cdiv(mamba_page, align * attn_bytes_per_token)``, align = max(16, block size).
    Example (Qwen3-Next, TP 1, bf16): mamba page 1097728 B, attention 2048 B/token ->
    16 * cdiv(1097728, 32768) = 16 * 34 = 544 tokens; the mamba page is padded to 544 * 2048.
    """
    from kvcalc.core.footprint import layer_spec

    mamba = [x for x in model.layers if x.kind == "mamba"]
    attn = [x for x in model.layers if x.kind != "mamba"]
    if not mamba or not attn:
        return cache.block_size, 0
    one = replace(cache, block_size=1)
    attn_1tok = layer_spec(attn[0], tp, one).page_size_bytes
    mamba_page = max(layer_spec(x, tp, one).page_size_bytes for x in mamba)
    align = max(16, cache.block_size)
    if model.mla:
        align = max(align, 128)
    bs = align * cdiv(mamba_page, align * attn_1tok)
    bs = 16 * cdiv(bs, 16)
    bs = max(bs, cache.block_size)
    padded = bs * attn_1tok
    return bs, (padded if padded != mamba_page else 0)


# ---------------------------------------------------------------- inputs and report


@record
class BudgetTerm:
    name: str
    bytes: int
    source: str  # "flag --x", "catalog", "checkpoint metadata", "estimate: ...", "derived"


@record
class PoolInputs:
    """Everything the pool needs besides the model and the plan; each term with its source."""

    vllm_version: str
    max_model_len: int
    max_num_batched_tokens: int
    max_num_batched_tokens_source: str
    max_concurrent_batches: int
    max_concurrent_batches_source: str
    available_per_stage: tuple[int, ...]  # KV memory per GPU of each PP stage
    terms: tuple[tuple[BudgetTerm, ...], ...] = ()  # per stage: the budget table
    gpu_name: str | None = None
    gpu_memory_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    requested_bytes: int | None = None
    kv_cache_memory_given: bool = False
    num_gpu_blocks_override: int | None = None
    disable_hybrid: bool = False
    weights_bytes_per_stage: tuple[int, ...] = ()
    activation_bytes: int = 0
    overhead_bytes: int = 0
    cudagraph_bytes: int = 0
    notes: tuple[str, ...] = ()

    @property
    def in_flight_tokens(self) -> int:
        return self.max_concurrent_batches * self.max_num_batched_tokens


@record
class WorkerPlan:
    pp_rank: int
    available_bytes: int
    bytes_per_block: int
    num_blocks: int  # this worker's own count, before the minimum
    check_bytes: int
    needed_bytes: int


@record
class PoolReport:
    model: ModelSpec
    plan: ParallelPlan
    inputs: PoolInputs
    groups: tuple[Group, ...]
    rule: str
    block_size: int
    workers: tuple[WorkerPlan, ...]
    bytes_per_block: int  # of the worker that decides (largest)
    num_blocks: int  # min over workers, after override; includes the null block
    blocks_per_request: int
    max_concurrency: float
    kv_cache_size_tokens: int
    fits: bool
    estimated_max_model_len: int | None
    error: str | None
    notes: tuple[str, ...] = field(default=())

    @property
    def pool_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def pool_bytes_per_gpu(self) -> int:
        return self.num_blocks * self.bytes_per_block


# ---------------------------------------------------------------- the computation


def _bytes_per_block(groups: list[Group], specs: list[CacheSpec], on_worker: set[int]) -> int:
    """max over groups of the sum of the pages of the group's layers on this worker."""
    return max((sum(specs[j].page_size_bytes for j in g.layers if j in on_worker) for g in groups), default=0)


def _needed(groups: list[Group], bpb: int, L: int, in_flight: int) -> int:
    return bpb * sum(g.blocks_per_request(L, in_flight) for g in groups)


def estimate_max_len(groups: list[Group], bpb: int, memory: int, L: int, in_flight: int) -> int:
    """Largest length in [1, L] whose need fits ``memory`` (binary search, 0 if none)."""
    if _needed(groups, bpb, 1, in_flight) > memory:
        return 0
    lo, hi, best = 1, L, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if _needed(groups, bpb, mid, in_flight) <= memory:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def _gib(n: int) -> float:
    return round(n / GIB, 2)


def fit_error(version: str, check: int, needed: int, L: int, estimate: int) -> str:
    if check <= 0:
        return (
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
            f"the engine. See {DOCS} for more details."
        )
    est = f"Based on the available memory, the estimated maximum model length is {estimate}. " if estimate > 0 else ""
    whose = "model's" if version == "0.33" else "models's"
    knob = (
        "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
        "`max_model_len` when initializing the engine."
        if version == "0.33"
        else "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    )
    return (
        f"To serve at least one request with the {whose} max seq len ({L}), ({_gib(needed)} GiB KV cache is needed, "
        f"which is larger than the available KV cache memory ({_gib(check)} GiB). {est}{knob} See {DOCS} for more details."
    )


def engine_cache(model: ModelSpec, plan: ParallelPlan, cache: CacheSettings) -> tuple[CacheSettings, int, list[str]]:
    """The cache settings vLLM ends up with (hybrid block alignment), and notes."""
    cache, mamba_pad, notes = _engine_cache(model, plan.tp, cache)
    return cache, mamba_pad, list(notes)


@lru_cache(maxsize=256)
def _engine_cache(model: ModelSpec, tp: int, cache: CacheSettings) -> tuple[CacheSettings, int, tuple[str, ...]]:
    bs, mamba_pad = hybrid_block_size(model, tp, cache)
    if bs == cache.block_size:
        return cache, mamba_pad, ()
    note = (
        f"attention block size raised from {cache.block_size} to {bs} tokens so one attention page holds a "
        "mamba state page (vLLM _align_hybrid_block_size)"
    )
    return replace(cache, block_size=bs), mamba_pad, (note,)


@record
class PoolPlan:
    """vLLM's result for one DP engine: groups, per-worker blocks, the fit check."""

    groups: tuple[Group, ...]
    specs: tuple[CacheSpec, ...]
    rule: str
    workers: tuple[WorkerPlan, ...]
    num_blocks: int
    blocks_per_request: int
    max_concurrency: float
    kv_cache_size_tokens: int
    error: str | None
    estimated_max_model_len: int | None


def max_concurrency(num_blocks: int, groups: list[Group] | tuple[Group, ...], max_model_len: int, in_flight: int) -> float:
    """vLLM get_max_concurrency_for_kv_cache_config: num_blocks / sum of per-group blocks per request."""
    return num_blocks / sum(g.blocks_per_request(max_model_len, in_flight) for g in groups)


def estimate_max_model_len_layers(specs: list[CacheSpec], memory: int, max_model_len: int, in_flight: int) -> int:
    """vLLM's public estimate_max_model_len: per-layer max_memory_usage_bytes summed, no
    grouping and no null block."""

    def need(n: int) -> int:
        return sum(s.max_memory_usage_bytes(n, in_flight) for s in specs)

    if need(1) > memory:
        return 0
    lo, hi, best = 1, max_model_len, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if need(mid) <= memory:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def pool_layout(
    worker_specs: list[dict[Any, CacheSpec]], *, disable_hybrid: bool = False
) -> tuple[list[Group], list[CacheSpec], str, list[int]]:
    """vLLM get_global_kv_cache_groups: the groups, the (unified) specs, the rule, and the
    bytes per block of each worker. ``worker_specs`` maps each worker's layer names to
    specs: TP ranks of a stage share names, PP stages hold different ones (vLLM merges by name)."""
    index: dict[Any, int] = {}
    specs: list[CacheSpec] = []
    on_worker: list[set[int]] = []
    for ws in worker_specs:
        mine = set()
        for name, spec in ws.items():
            if name not in index:
                index[name] = len(specs)
                specs.append(spec)
            mine.add(index[name])
        on_worker.append(mine)
    groups, specs, rule = group_layers(specs, disable_hybrid=disable_hybrid)
    return groups, specs, rule, [_bytes_per_block(groups, specs, mine) for mine in on_worker]


def plan_pool(
    worker_specs: list[dict[Any, CacheSpec]],
    available: list[int],
    *,
    max_model_len: int,
    in_flight: int,
    version: str = "0.33",
    num_gpu_blocks_override: int | None = None,
    disable_hybrid: bool = False,
    search_limit: int | None = None,
) -> PoolPlan:
    """vLLM get_global_kv_cache_groups + get_kv_cache_configs + the capacity log, for the
    workers of one DP engine (``worker_specs``: see ``pool_layout``)."""
    layout = pool_layout(worker_specs, disable_hybrid=disable_hybrid)
    return _plan_workers(*layout, available, max_model_len, in_flight, version, num_gpu_blocks_override, search_limit)


def _plan_workers(
    groups: list[Group],
    specs: list[CacheSpec],
    rule: str,
    bytes_per_block: list[int],
    available: list[int],
    L: int,
    f: int,
    version: str,
    override: int | None,
    search_limit: int | None,
) -> PoolPlan:
    """get_kv_cache_configs + the capacity log, from the layout: blocks per worker, the fit
    check with the null block, max concurrency and the estimated max length."""
    workers: list[WorkerPlan] = []
    error: str | None = None
    estimate: int | None = None
    for rank, (avail, bpb) in enumerate(zip(available, bytes_per_block)):
        if not groups:
            workers.append(WorkerPlan(rank, avail, 0, 1, avail, 0))
            continue
        if override is not None:
            avail = override * bpb
        check = avail - bpb if version == "0.33" else avail
        needed = _needed(groups, bpb, L, f)
        # no memory left: vLLM refuses to start (the error below); no blocks, not a negative count
        workers.append(WorkerPlan(rank, avail, bpb, max(0, avail // bpb) if bpb else 1, check, needed))
        if error is None and (check <= 0 or needed > check):
            estimate = estimate_max_len(groups, bpb, check, L, f) if check > 0 else 0
            error = fit_error(version, check, needed, L, estimate)
    if not groups:
        return PoolPlan((), tuple(specs), rule, tuple(workers), 1, 0, float("inf"), 0, None, None)
    num_blocks = override if override is not None else min(w.num_blocks for w in workers)
    per_request = sum(g.blocks_per_request(L, f) for g in groups)
    concurrency = num_blocks / per_request
    if error is None:
        limit = max(L, search_limit or L)
        estimate = min(estimate_max_len(groups, w.bytes_per_block, w.check_bytes, limit, f) for w in workers)
    return PoolPlan(
        tuple(groups), tuple(specs), rule, tuple(workers), num_blocks, per_request, concurrency,
        int(concurrency * L), error, estimate,
    )


@lru_cache(maxsize=512)
def _layout_of(
    model: ModelSpec, plan: ParallelPlan, cache: CacheSettings, mamba_pad: int, disable_hybrid: bool
) -> tuple[list[Group], list[CacheSpec], str, list[int]]:
    """The pool layout of a model on a plan (computed once; callers do not modify it)."""
    worker_specs = [
        {
            (layer.layer, layer.kind): (s.with_padding(mamba_pad) if mamba_pad and isinstance(s, MambaSpec) else s)
            for layer, s in st.specs
        }
        for st in stage_specs(model, plan, cache)
    ]
    return pool_layout(worker_specs, disable_hybrid=disable_hybrid)


def pool_report(model: ModelSpec, plan: ParallelPlan, cache: CacheSettings, inputs: PoolInputs) -> PoolReport:
    """vLLM's pool for one DP engine. The same arguments give the same (cached) report."""
    return _pool_report(model, plan, cache, inputs)


@lru_cache(maxsize=1024)
def _pool_report(model: ModelSpec, plan: ParallelPlan, cache: CacheSettings, inputs: PoolInputs) -> PoolReport:
    cache, mamba_pad, notes = _engine_cache(model, plan.tp, cache)
    layout_plan = ParallelPlan(tp=plan.tp, pp=plan.pp, pp_layers=plan.pp_layers)  # dp and nodes do not matter
    layout = _layout_of(model, layout_plan, cache, mamba_pad, inputs.disable_hybrid)
    if len(inputs.available_per_stage) != len(layout[3]):
        raise PlanError("internal: one available-memory figure per PP stage is needed")  # pragma: no cover
    pp = _plan_workers(
        *layout,
        list(inputs.available_per_stage),
        inputs.max_model_len,
        inputs.in_flight_tokens,
        inputs.vllm_version,
        inputs.num_gpu_blocks_override,
        model.max_model_len,
    )
    block_size = cache.block_size
    full = [g for g in pp.groups if g.kind in ("full", "mla")]
    if full:
        block_size = full[0].block_size
    elif pp.groups:
        block_size = pp.groups[0].block_size
    return PoolReport(
        model=model,
        plan=plan,
        inputs=inputs,
        groups=pp.groups,
        rule=pp.rule,
        block_size=block_size,
        workers=pp.workers,
        bytes_per_block=max((w.bytes_per_block for w in pp.workers), default=0),
        num_blocks=pp.num_blocks,
        blocks_per_request=pp.blocks_per_request,
        max_concurrency=pp.max_concurrency,
        kv_cache_size_tokens=pp.kv_cache_size_tokens,
        fits=pp.error is None,
        estimated_max_model_len=pp.estimated_max_model_len,
        error=pp.error,
        notes=notes + inputs.notes,
    )
