"""The KV pool, the seed's third measure, computed the way vLLM does at start-up.

Mirrors vLLM 0.33 ``v1/core/kv_cache_planning.py`` (grouping, bytes per block, blocks per
worker and their minimum, the fit check with the null block, the estimated max length)
and ``kv_cache_utils.py`` (max concurrency, the token figure). Older releases: every rule
that changed a number is a field of the release line's ``RuleLine`` (core/vllm_rules.py),
applied in core/pool_rules.py. Pure: no I/O.
"""

from __future__ import annotations

from functools import lru_cache
from math import lcm
from typing import Any

from kvcalc.core import pool_rules as PR
from kvcalc.core import vllm_rules as R
from kvcalc.core.footprint import CacheSettings, stage_specs
from kvcalc.core.grouping import Group, _promote_local, _unify_page_size, group_layers
from kvcalc.core.mamba_cache import chunk_size
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan
from kvcalc.core.record import field, record, replace
from kvcalc.core.specs import CacheSpec, CrossAttentionSpec, MambaSpec, cdiv
from kvcalc.core.vllm_texts import fit_error
from kvcalc.errors import PlanError, named

__all__ = ["Group", "_promote_local", "_unify_page_size", "group_layers"]  # grouping: kvcalc.core.grouping

GIB = 1 << 30


# ---------------------------------------------------------------- block size of hybrids


def hybrid_block_size(model: ModelSpec, tp: int, cache: CacheSettings, rules: R.RuleLine = R.CURRENT) -> tuple[int, int]:
    """vLLM ``Platform._align_hybrid_block_size`` for attention + mamba models.

    Returns (attention block size, mamba page padded to match, or 0). The attention block
    size is raised so one attention page holds at least one mamba state page:
    ``align * cdiv(mamba_page, align * attn_bytes_per_token)``, align = max(16, block size).
    Example (Qwen3-Next, TP 1, bf16): mamba page 1097728 B, attention 2048 B/token ->
    16 * cdiv(1097728, 32768) = 16 * 34 = 544 tokens; the mamba page is padded to 544 * 2048.
    Per release (``RuleLine.mamba_align``): align 16 up to 0.19.x, max(16, block size) from
    0.20.0, MLA hybrids at least 128 from 0.27.0; no V1 mamba support before 0.10.0. With
    ``mamba_cache_mode`` 'all' the block is a multiple of lcm(the Mamba kernel's chunk, align)
    instead, ``chunk * cdiv(cdiv(mamba_page, attn_bytes_per_token), chunk)`` (vllm==0.15.1:
    models/config.py:466-487; vllm==0.20.0: platforms/interface.py, the same); in 'align' with
    prefill checkpoints (0.33) align is also a multiple of their alignment (interface.py:1088-1093).
    """
    from kvcalc.core.footprint import layer_spec

    mamba = [x for x in model.layers if x.kind == "mamba"]
    attn = [x for x in model.layers if x.kind != "mamba"]
    if not mamba:
        return cache.block_size, 0
    if rules.mamba_align == R.MAMBA_NONE:
        raise PlanError(
            f"{named('vllm_version')}: vLLM's V1 engine serves mamba layers from 0.10.0 ({model.name} has "
            f"{len(mamba)}); give 0.10.0 or later"
        )
    if not attn:
        return cache.block_size, 0
    one = replace(cache, block_size=1)
    attn_1tok = layer_spec(attn[0], tp, one).page_size_bytes
    mamba_page = max(layer_spec(x, tp, one).page_size_bytes for x in mamba)
    align = 16 if rules.mamba_align == R.MAMBA_16 else max(16, cache.block_size)
    if model.mla and rules.mamba_align == R.MAMBA_MLA128:
        align = max(align, 128)
    if cache.mamba_cache_mode == "all":
        chunk = lcm(chunk_size(model.arch), align)
        bs = chunk * cdiv(cdiv(mamba_page, attn_1tok), chunk)
    else:
        align = lcm(align, cache.mamba_checkpoint_alignment)
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

    vllm_version: str  # as given ("0.19.1", "0.20")
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
    rules: R.RuleLine = R.CURRENT  # the release line's rules
    rules_note: str = ""  # "vLLM 0.19.1: rules of 0.19.0–0.19.x"

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
    # what this worker logs before the minimum over workers (0.8.0-0.11.0 log per worker)
    kv_cache_size_tokens: int = 0
    max_concurrency: float = 0.0


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


def estimate_max_len(groups: list[Group], bpb: int, memory: int, L: int, in_flight: int) -> int:
    """Largest length in [1, L] whose need (0.33's sum over groups) fits ``memory`` (0 if none)."""
    return PR.estimate(lambda n: bpb * sum(g.blocks_per_request(n, in_flight) for g in groups), memory, L)


def engine_cache(
    model: ModelSpec, plan: ParallelPlan, cache: CacheSettings, rules: R.RuleLine = R.CURRENT
) -> tuple[CacheSettings, int, list[str]]:
    """The cache settings vLLM ends up with (hybrid block alignment), and notes."""
    cache, mamba_pad, notes = _engine_cache(model, plan.tp, cache, rules)
    return cache, mamba_pad, list(notes)


@lru_cache(maxsize=256)
def _engine_cache(
    model: ModelSpec, tp: int, cache: CacheSettings, rules: R.RuleLine
) -> tuple[CacheSettings, int, tuple[str, ...]]:
    bs, mamba_pad = hybrid_block_size(model, tp, cache, rules)
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
    notes: tuple[str, ...] = ()


def max_concurrency(num_blocks: int, groups: list[Group] | tuple[Group, ...], max_model_len: int, in_flight: int) -> float:
    """vLLM get_max_concurrency_for_kv_cache_config: num_blocks / sum of per-group blocks per request."""
    return num_blocks / sum(g.blocks_per_request(max_model_len, in_flight) for g in groups)


def estimate_max_model_len_layers(specs: list[CacheSpec], memory: int, max_model_len: int, in_flight: int) -> int:
    """vLLM's public estimate_max_model_len: per-layer max_memory_usage_bytes summed, no
    grouping and no null block."""
    return PR.estimate(lambda n: sum(s.max_memory_usage_bytes(n, in_flight) for s in specs), memory, max_model_len)


@record
class Layout:
    """The global groups, the unified specs, the grouping rule; per worker: bytes per block,
    the layers it holds and their specs as the release builds them (before grouping)."""

    groups: tuple[Group, ...]
    specs: tuple[CacheSpec, ...]
    rule: str
    bytes_per_block: tuple[int, ...]
    on_worker: tuple[frozenset[int], ...]
    raw: tuple[tuple[CacheSpec, ...], ...]


def pool_layout(
    worker_specs: list[dict[Any, CacheSpec]],
    *,
    disable_hybrid: bool = False,
    rules: R.RuleLine = R.CURRENT,
    encoder_input_tokens: int = 0,
) -> Layout:
    """vLLM get_global_kv_cache_groups under the release's rules. ``worker_specs`` maps each
    worker's layer names to specs: TP ranks of a stage share names, PP stages hold different
    ones (vLLM merges by name). ``encoder_input_tokens``: what a cross-attention layer
    reserves per request from 0.11.0 (max_num_encoder_input_tokens)."""
    index: dict[Any, int] = {}
    specs: list[CacheSpec] = []
    on_worker: list[frozenset[int]] = []
    raw: list[tuple[CacheSpec, ...]] = []
    for ws in worker_specs:
        mine = set()
        for name, spec in ws.items():
            if name not in index:
                index[name] = len(specs)
                spec = PR.release_spec(spec, rules)
                if isinstance(spec, CrossAttentionSpec) and rules.cross_from_batch and encoder_input_tokens:
                    spec = replace(spec, planned_tokens=encoder_input_tokens)
                specs.append(spec)
            mine.add(index[name])
        on_worker.append(frozenset(mine))
        raw.append(tuple(specs[j] for j in sorted(mine)))
    promote = PR.promotes(specs, rules, disable_hybrid)
    groups, unified, rule = group_layers(specs, disable_hybrid=promote, ratio=rules.group_ratio)
    if promote and not disable_hybrid and len({s.kind for s in specs}) > 1:
        rule += f" (vLLM {rules.label} allocates sliding/chunked layers as full attention here)"
    bpb = tuple(_bytes_per_block(groups, unified, set(mine)) for mine in on_worker)
    return Layout(tuple(groups), tuple(unified), rule, bpb, tuple(on_worker), tuple(raw))


def plan_pool(
    worker_specs: list[dict[Any, CacheSpec]],
    available: list[int],
    *,
    max_model_len: int,
    in_flight: int,
    rules: R.RuleLine = R.CURRENT,
    num_gpu_blocks_override: int | None = None,
    disable_hybrid: bool = False,
    search_limit: int | None = None,
    encoder_input_tokens: int = 0,
) -> PoolPlan:
    """vLLM get_global_kv_cache_groups + get_kv_cache_configs + the capacity log, for the
    workers of one DP engine (``worker_specs``: see ``pool_layout``)."""
    layout = pool_layout(worker_specs, disable_hybrid=disable_hybrid, rules=rules, encoder_input_tokens=encoder_input_tokens)
    return _plan_workers(layout, available, max_model_len, in_flight, rules, num_gpu_blocks_override, search_limit)


def _worker_checks(
    layout: Layout, available: list[int], L: int, f: int, rules: R.RuleLine, override: int | None
) -> tuple[list[WorkerPlan], list[PR.Need], str | None]:
    """Each worker's blocks and fit check, the need functions, and vLLM's refusal (the first failing worker's)."""
    groups = list(layout.groups)
    whole = _bytes_per_block(groups, list(layout.specs), set(range(len(layout.specs))))
    workers: list[WorkerPlan] = []
    needs: list[PR.Need] = []
    error: str | None = None
    top = max(layout.bytes_per_block, default=0)
    for rank, (avail, bpb) in enumerate(zip(available, layout.bytes_per_block)):
        if override is not None:
            avail = override * bpb
        check = PR.check_memory(rules, avail, available if override is None else [avail], bpb)
        need = PR.need_function(rules, groups, layout.raw[rank], bpb, whole, set(layout.on_worker[rank]), f)
        needs.append(need)
        needed = need(L)
        # 0.8.0-0.8.1: min memory over workers // the largest worker's block bytes
        blocks = (min(available) // top) if rules.fit_check == R.FIT_MIN_ALL and override is None else avail // bpb
        workers.append(WorkerPlan(rank, avail, bpb, max(0, blocks) if bpb else 1, check, needed))
        if error is None and (check <= 0 or needed > check):
            error = fit_error(rules, check, needed, L, PR.estimate(need, check, L))
    return workers, needs, error


def _plan_workers(
    layout: Layout,
    available: list[int],
    L: int,
    f: int,
    rules: R.RuleLine,
    override: int | None,
    search_limit: int | None,
) -> PoolPlan:
    """get_kv_cache_configs + the capacity log, from the layout: blocks per worker, the fit
    check, max concurrency, the token figure and the estimated max length."""
    groups = list(layout.groups)
    notes: list[str] = []
    if override is not None and not rules.override_applied:
        notes.append(f"vLLM {rules.label} logs --num-gpu-blocks-override but does not apply it (vllm==0.9.1: "
                     "kv_cache_utils.py:657-663): the memory decides")
        override = None
    if not groups:
        empty = tuple(WorkerPlan(rank, a, 0, 1, a, 0) for rank, a in enumerate(available))
        return PoolPlan((), layout.specs, layout.rule, empty, 1, 0, float("inf"), 0, None, None, tuple(notes))
    workers, needs, error = _worker_checks(layout, available, L, f, rules, override)
    num_blocks = override if override is not None else min(w.num_blocks for w in workers)
    per_request = sum(g.blocks_per_request(L, f) for g in groups)
    conc = PR.concurrency(rules, num_blocks, groups, L, f)
    estimate: int | None
    if error is None:
        limit = max(L, search_limit or L)
        estimate = min(PR.estimate(n, w.check_bytes, limit) for n, w in zip(needs, workers))
    else:
        estimate = min(PR.estimate(n, w.check_bytes, L) for n, w in zip(needs, workers))
    logged = []
    for w in workers:  # what each worker logs before the minimum (0.8.0-0.11.0)
        c = PR.concurrency(rules, w.num_blocks, groups, L, f)
        logged.append(replace(w, kv_cache_size_tokens=PR.size_tokens(rules, w.num_blocks, groups, c, L), max_concurrency=c))
    return PoolPlan(
        tuple(groups), layout.specs, layout.rule, tuple(logged), num_blocks, per_request, conc,
        PR.size_tokens(rules, num_blocks, groups, conc, L), error, estimate, tuple(notes),
    )


@lru_cache(maxsize=512)
def _layout_of(
    model: ModelSpec, plan: ParallelPlan, cache: CacheSettings, mamba_pad: int, disable_hybrid: bool, rules: R.RuleLine,
    encoder_input_tokens: int,
) -> Layout:
    """The pool layout of a model on a plan (computed once; callers do not modify it)."""
    worker_specs = [
        {
            (layer.layer, layer.kind): (s.with_padding(mamba_pad) if mamba_pad and isinstance(s, MambaSpec) else s)
            for layer, s in st.specs
        }
        for st in stage_specs(model, plan, cache)
    ]
    return pool_layout(worker_specs, disable_hybrid=disable_hybrid, rules=rules, encoder_input_tokens=encoder_input_tokens)


def pool_report(model: ModelSpec, plan: ParallelPlan, cache: CacheSettings, inputs: PoolInputs) -> PoolReport:
    """vLLM's pool for one DP engine. The same arguments give the same (cached) report."""
    return _pool_report(model, plan, cache, inputs)


@lru_cache(maxsize=1024)
def _pool_report(model: ModelSpec, plan: ParallelPlan, cache: CacheSettings, inputs: PoolInputs) -> PoolReport:
    rules = inputs.rules
    cache, mamba_pad, notes = _engine_cache(model, plan.tp, cache, rules)
    layout_plan = ParallelPlan(tp=plan.tp, pp=plan.pp, pp_layers=plan.pp_layers)  # dp and nodes do not matter
    encoder_input = inputs.max_num_batched_tokens if model.encoder_decoder else 0
    layout = _layout_of(model, layout_plan, cache, mamba_pad, inputs.disable_hybrid, rules, encoder_input)
    if len(inputs.available_per_stage) != len(layout.bytes_per_block):
        raise PlanError("internal: one available-memory figure per PP stage is needed")  # pragma: no cover
    pp = _plan_workers(
        layout,
        list(inputs.available_per_stage),
        inputs.max_model_len,
        inputs.in_flight_tokens,
        rules,
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
        notes=notes + inputs.notes + pp.notes,
    )
