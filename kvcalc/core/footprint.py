"""From a model spec and a parallel plan to rank-local cache specs, and the seed's
measures for a given traffic: effective KV, block-rounded KV, empty slots.

Every number comes from the per-layer specs of ``kvcalc.core.specs``.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from kvcalc.core.dtypes import KV_DTYPES, MODEL_DTYPES, KVDtype
from kvcalc.core.memo import Memo
from kvcalc.core.model import LayerArch, ModelSpec
from kvcalc.core.plan import ParallelPlan, kv_heads_per_rank, pp_ranges, rank_ids
from kvcalc.core.record import cached_property, record
from kvcalc.core.specs import (
    AttentionSpec,
    CacheSpec,
    ChunkedLocalSpec,
    CrossAttentionSpec,
    MambaSpec,
    MLASpec,
    SlidingWindowSpec,
    StateTensor,
)
from kvcalc.errors import PlanError, named


@record
class CacheSettings:
    """Engine-side choices that shape every page."""

    kv_dtype: KVDtype
    block_size: int = 16
    # a speculative drafter's own kv_cache_dtype (vLLM 0.26+: the drafter's layers are built with a cache config
    # whose cache_dtype is the speculative config's; vllm==0.26.0: v1/spec_decode/llm_base_proposer.py:1303-1310,
    # v1/worker/gpu/spec_decode/eagle/utils.py:42-48); None: the drafter's layers take kv_dtype
    draft_kv_dtype: KVDtype | None = None
    mamba_dtype_bytes: int = 2  # conv state: the model dtype unless --mamba-cache-dtype
    mamba_ssm_dtype_bytes: int = 2  # temporal state: auto = the conv dtype
    num_speculative_blocks: int = 0
    # vLLM's mamba_cache_mode and its prefill-checkpoint pages (kvcalc.core.mamba_cache)
    mamba_cache_mode: str = "none"
    mamba_checkpoint_blocks: int = 0
    mamba_checkpoint_alignment: int = 1
    mamba_all_adds_speculative: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise PlanError(f"{named('block_size')} must be a positive integer, got {self.block_size!r}")


def resolve_kv_dtype(name: str, model: ModelSpec, model_dtype: str | None = None, label: str = "") -> KVDtype:
    """`auto` is the model dtype, as vLLM does; a named dtype is looked up. ``label`` names the setting in errors
    (default: --kv-dtype)."""
    label = label or named("kv_dtype")
    key = name.strip().lower()
    if key == "auto":
        mdt = model_dtype or model.dtype
        return KVDtype(mdt, MODEL_DTYPES[mdt], note="auto: the model dtype")
    if key not in KV_DTYPES:
        valid = ", ".join(("auto", *KV_DTYPES))
        raise PlanError(f"{label} {name!r} is not known; valid: {valid}")
    dt = KV_DTYPES[key]
    if dt.mla_only and not model.mla:
        raise PlanError(f"{label} {key} is only for MLA models; {model.name} uses {model.attention}")
    return dt


def layer_spec(layer: LayerArch, tp: int, cache: CacheSettings) -> CacheSpec:
    """The cache spec one TP rank holds for one layer module."""
    bs = cache.block_size
    dt = cache.draft_kv_dtype if layer.draft and cache.draft_kv_dtype is not None else cache.kv_dtype
    if layer.kind == "mamba":
        tensors = []
        for t in layer.state:
            shape = list(t.shape)
            if t.split_dim >= 0:
                if shape[t.split_dim] % tp:
                    raise PlanError(
                        f"{named('tp')} {tp} does not divide a state dimension of {shape[t.split_dim]} "
                        f"in layer {layer.layer}; valid: a divisor of it"
                    )
                shape[t.split_dim] //= tp
            nbytes = cache.mamba_dtype_bytes if t.role == "conv" else cache.mamba_ssm_dtype_bytes
            tensors.append(StateTensor(tuple(shape), nbytes))
        return MambaSpec(
            block_size=bs, tensors=tuple(tensors), num_speculative_blocks=cache.num_speculative_blocks,
            cache_mode=cache.mamba_cache_mode, checkpoint_blocks=cache.mamba_checkpoint_blocks,
            all_adds_speculative=cache.mamba_all_adds_speculative,
        )
    if layer.kind == "mla":
        return MLASpec(
            block_size=bs,
            num_kv_heads=1,
            head_size=layer.head_size,
            head_size_v=0,
            dtype_bytes=dt.bytes,
            token_bytes_override=dt.mla_token_bytes,
        )
    heads, _ = kv_heads_per_rank(layer.num_kv_heads, tp)
    common = dict(
        block_size=bs,
        num_kv_heads=heads,
        head_size=layer.head_size,
        head_size_v=layer.head_size_v,
        dtype_bytes=dt.bytes,
        scale_bytes_per_head=dt.scale_bytes_per_head,
    )
    if layer.kind == "full":
        return AttentionSpec(**common)
    if layer.kind == "sliding":
        return SlidingWindowSpec(**common, window=layer.window)
    if layer.kind == "chunked":
        return ChunkedLocalSpec(**common, chunk=layer.window)
    if layer.kind == "cross":
        return CrossAttentionSpec(**common, encoder_tokens=layer.window)
    raise PlanError(f"layer kind {layer.kind!r} has no cache spec")  # pragma: no cover


def check_tp(model: ModelSpec, tp: int) -> tuple[int, bool]:
    """vLLM's checks for a TP size: query heads must divide; KV heads divide or replicate.
    Returns (KV heads per rank, replicated)."""
    if model.num_attention_heads and model.num_attention_heads % tp:
        raise PlanError(
            f"{named('tp')} {tp} does not divide the model's {model.num_attention_heads} attention heads "
            f"(vLLM: Total number of attention heads must be divisible by tensor parallel size)"
        )
    for what, count in model.tp_divisors:
        if count % tp:
            raise PlanError(f"{named('tp')} {tp} does not divide the model's {count} {what}; valid: a divisor of {count}")
    if model.mla:
        return 1, tp > 1
    if not model.num_kv_heads:
        return 0, False
    return kv_heads_per_rank(model.num_kv_heads, tp)


@record
class StageSpecs:
    """What every TP rank of one PP stage holds."""

    pp_rank: int
    layers: tuple[int, int]  # [start, end) decoder layers
    specs: tuple[tuple[LayerArch, CacheSpec], ...]
    kv_heads: int
    replicated: bool

    @cached_property
    def grouped(self) -> tuple[tuple[CacheSpec, int], ...]:
        """Equal specs counted together, in layer order: (spec, layers holding it)."""
        return group_specs(s for _, s in self.specs)

    @cached_property
    def bytes_per_token(self) -> int:
        return sum(s.decoder_bytes_per_token * n for s, n in self.grouped)

    @cached_property
    def state_bytes_per_request(self) -> int:
        return sum(s.state_bytes * n for s, n in self.grouped)


def group_specs(specs: Iterable[CacheSpec]) -> tuple[tuple[CacheSpec, int], ...]:
    counts: dict[CacheSpec, int] = {}
    for spec in specs:
        counts[spec] = counts.get(spec, 0) + 1
    return tuple(counts.items())


def spec_key(layer: LayerArch, cache: CacheSettings) -> tuple:
    """What decides a layer's spec besides its index."""
    own = layer.draft and cache.draft_kv_dtype is not None
    return (layer.kind, layer.num_kv_heads, layer.head_size, layer.head_size_v, layer.window, layer.state, own)


def _specs_of(layers: Iterable[LayerArch], tp: int, cache: CacheSettings) -> tuple[tuple[LayerArch, CacheSpec], ...]:
    """(layer, spec) pairs; layers that differ only in their index share one spec object."""
    shared: dict[tuple, CacheSpec] = {}
    out = []
    for layer in layers:
        key = spec_key(layer, cache)
        spec = shared.get(key)
        if spec is None:
            spec = shared[key] = layer_spec(layer, tp, cache)
        out.append((layer, spec))
    return tuple(out)


@lru_cache(maxsize=1024)
def _layout(
    model: ModelSpec, tp: int, pp: int, pp_layers: tuple[int, ...] | None, cache: CacheSettings
) -> tuple[tuple[StageSpecs, ...], StageSpecs, tuple[int, ...]]:
    """Every PP stage's specs; the whole model at TP 1 (``logical_stage``); and which
    measures repeat: for each stage then the whole model, the index of the first stage
    holding the same specs (itself when none before; -1: the whole model is measured)."""
    heads, replicated = check_tp(model, tp)
    ranges = pp_ranges(model.num_layers, pp, pp_layers)
    specs = _specs_of(model.layers, tp, cache)
    last = len(ranges) - 1
    # a drafter's layers (speculative decoding) are numbered after the decoder's: vLLM builds the drafter on the
    # last PP rank only (vllm==0.33.0: v1/worker/gpu_model_runner.py:598)
    stages = tuple(
        StageSpecs(pp_rank, (start, end), tuple(x for x in specs if start <= x[0].layer and (x[0].layer < end or pp_rank == last)),
                   heads, replicated)
        for pp_rank, (start, end) in enumerate(ranges)
    )
    whole = logical_stage(model, cache)
    groupings = [st.grouped for st in stages]
    same = [groupings.index(g) for g in groupings]
    same.append(groupings.index(whole.grouped) if whole.grouped in groupings else -1)
    return stages, whole, tuple(same)


def stage_specs(model: ModelSpec, plan: ParallelPlan, cache: CacheSettings) -> list[StageSpecs]:
    """Every PP stage's specs (built once per model, TP, PP split and cache settings)."""
    return list(_layout(model, plan.tp, plan.pp, plan.pp_layers, cache)[0])


@lru_cache(maxsize=256)
def logical_stage(model: ModelSpec, cache: CacheSettings) -> StageSpecs:
    """The whole model at TP 1: one replica, no replication (one copy of every KV head)."""
    return StageSpecs(0, (0, model.num_layers), _specs_of(model.layers, 1, cache), model.num_kv_heads, False)


@record
class Traffic:
    """Cached positions of each request at the moment measured."""

    requests: tuple[int, ...]
    description: str = ""

    def __post_init__(self) -> None:
        reqs = self.requests
        if reqs and set(map(type, reqs)) == {int} and min(reqs) >= 0 and reqs.count(reqs[0]) == len(reqs):
            self.__dict__["lengths"] = ((reqs[0], len(reqs)),)  # a batch of one length: one pair
            return
        counts: dict[int, int] = {}
        for t in reqs:
            if not isinstance(t, int) or t < 0:
                raise PlanError(f"token counts must be non-negative integers, got {t!r}")
            counts[t] = counts.get(t, 0) + 1
        self.__dict__["lengths"] = tuple(counts.items())  # what ``lengths`` would compute

    @cached_property
    def tokens(self) -> int:
        return sum(self.requests)

    @cached_property
    def longest(self) -> int:
        """The longest request's positions (0 without requests)."""
        return max((t for t, _ in self.lengths), default=0)

    @cached_property
    def lengths(self) -> tuple[tuple[int, int], ...]:
        """(cached positions, requests of that length), first-seen order: a batch of
        10**6 equal requests is one pair."""
        counts: dict[int, int] = {}
        for t in self.requests:
            counts[t] = counts.get(t, 0) + 1
        return tuple(counts.items())


@record
class Measures:
    """The seed's three request-side measures for a set of cache specs."""

    effective_bytes: int
    block_rounded_bytes: int
    empty_slot_bytes: int
    state_bytes: int  # per-request recurrent state included in both measures above


def measure_grouped(grouped: Iterable[tuple[CacheSpec, int]], lengths: tuple[tuple[int, int], ...]) -> Measures:
    """The measures of ``count`` layers of each spec for requests of the given lengths."""
    eff = rounded = state = live = 0
    if len(lengths) == 1:  # a batch of one length (most traffic): the same sums, unrolled once
        ((t, n),) = lengths
        for spec, count in grouped:
            if spec.state_bytes and t:
                state += spec.state_bytes * n * count
            eff += spec.effective_bytes(t) * n * count
            rounded += spec.block_rounded_bytes(t) * n * count
        return Measures(eff, rounded, rounded - eff, state)  # type: ignore[call-arg]
    for t, n in lengths:
        if t:
            live += n
    for spec, count in grouped:
        state += spec.state_bytes * live * count
        effective, block_rounded = spec.effective_bytes, spec.block_rounded_bytes
        for t, n in lengths:
            eff += effective(t) * n * count
            rounded += block_rounded(t) * n * count
    return Measures(eff, rounded, rounded - eff, state)


def measure(specs: tuple[tuple[LayerArch, CacheSpec], ...], traffic: Traffic) -> Measures:
    return measure_grouped(group_specs(s for _, s in specs), traffic.lengths)


@record
class RankFootprint:
    global_rank: int
    local_rank: int
    node: int
    dp_rank: int
    pp_rank: int
    tp_rank: int
    layers: tuple[int, int]
    kv_heads: int
    replicated: bool
    bytes_per_token: int
    state_bytes_per_request: int
    effective_bytes: int
    block_rounded_bytes: int


@record
class Footprint:
    """Everything ``kvcalc size`` reports before the pool."""

    model: ModelSpec
    plan: ParallelPlan
    cache: CacheSettings
    traffic: Traffic
    stages: tuple[StageSpecs, ...]
    stage_measures: tuple[Measures, ...]  # per PP stage: what each of its ranks holds
    logical: Measures  # one replica, no TP replication (one copy of every KV head)
    bytes_per_token: int  # one replica, no replication, every attention layer
    state_bytes_per_request: int
    allocated_tokens: int  # sum over requests of ceil(t / block) * block

    @property
    def tokens(self) -> int:
        return self.traffic.tokens

    @cached_property
    def ranks(self) -> tuple[RankFootprint, ...]:
        """Every rank of the deployment (built when first asked for), in ``rank_ids`` order:
        global rank = (dp * pp + pp_rank) * tp + tp_rank."""
        measures = self.stage_measures
        return tuple(
            RankFootprint(*fixed, measures[pp].effective_bytes, measures[pp].block_rounded_bytes)  # type: ignore[call-arg]
            for pp, fixed in self.rank_layout
        )

    @property
    def rank_layout(self) -> tuple[tuple[int, tuple], ...]:
        """Per rank, in ``ranks`` order: its PP stage and its fixed figures (RankFootprint's fields
        up to ``state_bytes_per_request``); the measures come from the stage's ``stage_measures``."""
        return rank_layout(self.plan, self.stages)

    # (one stage, the common case, read directly: a sweep's payload asks for each of these per row)
    @property
    def bytes_per_token_per_rank(self) -> int:
        st = self.stages
        return st[0].bytes_per_token if len(st) == 1 else max((s.bytes_per_token for s in st), default=0)

    @property
    def effective_bytes_per_rank(self) -> int:
        ms = self.stage_measures
        return ms[0].effective_bytes if len(ms) == 1 else max((m.effective_bytes for m in ms), default=0)

    @property
    def block_rounded_bytes_per_rank(self) -> int:
        ms = self.stage_measures
        return ms[0].block_rounded_bytes if len(ms) == 1 else max((m.block_rounded_bytes for m in ms), default=0)

    def replica_total(self, attr: str) -> int:
        """Sum over the ranks of one DP replica, TP replicas included: each of a stage's TP
        ranks holds the stage's measures, so a measure sums as TP x its stages' figures."""
        if attr in _MEASURED:
            ms = self.stage_measures
            if len(ms) == 1:
                return self.plan.tp * getattr(ms[0], attr)  # type: ignore[no-any-return]
            return self.plan.tp * sum(getattr(m, attr) for m in ms)
        return sum(getattr(r, attr) for r in self.ranks if r.dp_rank == 0)

    def deployment_total(self, attr: str) -> int:
        """Sum over every rank: DP replicas are copies of one replica."""
        if attr in _MEASURED:
            return self.plan.dp * self.replica_total(attr)
        return sum(getattr(r, attr) for r in self.ranks)


_MEASURED = frozenset({"effective_bytes", "block_rounded_bytes"})  # a rank's figures from its stage's Measures


_RANK_LAYOUTS: Memo[tuple[tuple[int, tuple], ...]] = Memo(256)


def rank_layout(plan: ParallelPlan, stages: tuple[StageSpecs, ...]) -> tuple[tuple[int, tuple], ...]:
    """(PP stage, fixed figures) of every rank; kept per plan and stages objects (a sweep's
    rows share them): what a rank holds besides its stage's measures."""
    return _RANK_LAYOUTS.get((id(plan), id(stages)), _rank_layout, plan, stages, keep=(plan, stages))


def _rank_layout(plan: ParallelPlan, stages: tuple[StageSpecs, ...]) -> tuple[tuple[int, tuple], ...]:
    out = []
    for r in rank_ids(plan):
        st = stages[r.pp_rank]
        fixed = (r.global_rank, r.local_rank, r.node, r.dp_rank, r.pp_rank, r.tp_rank, st.layers, st.kv_heads,
                 st.replicated, st.bytes_per_token, st.state_bytes_per_request)
        out.append((r.pp_rank, fixed))
    return tuple(out)


# _layout by the identity of model and cache (no record hash per call)
_LAYOUTS: Memo[tuple[tuple[StageSpecs, ...], StageSpecs, tuple[int, ...]]] = Memo(1024)


def stage_layout(model: ModelSpec, plan: ParallelPlan, cache: CacheSettings) -> tuple:
    """The per-stage specs ``footprint`` measures (kept per model, plan and cache objects): a
    caller that keeps it (a sweep's setup) passes it back as ``layout``."""
    return _LAYOUTS.get(
        (id(model), plan.tp, plan.pp, plan.pp_layers, id(cache)),
        _layout, model, plan.tp, plan.pp, plan.pp_layers, cache,
        keep=(model, cache),
    )


def footprint(
    model: ModelSpec, plan: ParallelPlan, cache: CacheSettings, traffic: Traffic, layout: tuple | None = None
) -> Footprint:
    stages, whole, same = layout or stage_layout(model, plan, cache)
    lengths = traffic.lengths
    if len(stages) == 1:
        measures: tuple[Measures, ...] = (measure_grouped(stages[0].grouped, lengths),)
    else:
        found: list[Measures] = []  # stages holding equal specs (PP halves) measured once
        for i, st in enumerate(stages):
            j = same[i]
            found.append(found[j] if j < i else measure_grouped(st.grouped, lengths))
        measures = tuple(found)
    j = same[-1]
    logical = measures[j] if j >= 0 else measure_grouped(whole.grouped, lengths)
    bs = cache.block_size
    if len(lengths) == 1:
        ((t, n),) = lengths
        allocated = -(-t // bs) * bs * n
    else:
        allocated = sum([-(-t // bs) * bs * n for t, n in lengths])
    # positional, in field order: model, plan, cache, traffic, stages, stage_measures, logical,
    # bytes_per_token, state_bytes_per_request, allocated_tokens
    return Footprint(model, plan, cache, traffic, stages, measures, logical,  # type: ignore[call-arg]
                     whole.bytes_per_token, whole.state_bytes_per_request, allocated)
