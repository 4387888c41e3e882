"""From a model spec and a parallel plan to rank-local cache specs, and the seed's
measures for a given traffic: effective KV, block-rounded KV, empty slots.

Every number comes from the per-layer specs of ``kvcalc.core.specs``.
"""

from __future__ import annotations

from kvcalc.core.dtypes import KV_DTYPES, MODEL_DTYPES, KVDtype
from kvcalc.core.model import LayerArch, ModelSpec
from kvcalc.core.plan import ParallelPlan, kv_heads_per_rank, pp_ranges, rank_ids
from kvcalc.core.record import record
from kvcalc.core.specs import (
    AttentionSpec,
    CacheSpec,
    ChunkedLocalSpec,
    CrossAttentionSpec,
    MambaSpec,
    MLASpec,
    SlidingWindowSpec,
    StateTensor,
    cdiv,
)
from kvcalc.errors import PlanError, named


@record
class CacheSettings:
    """Engine-side choices that shape every page."""

    kv_dtype: KVDtype
    block_size: int = 16
    mamba_dtype_bytes: int = 2  # conv state: the model dtype unless --mamba-cache-dtype
    mamba_ssm_dtype_bytes: int = 2  # temporal state: auto = the conv dtype
    num_speculative_blocks: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise PlanError(f"{named('block_size')} must be a positive integer, got {self.block_size!r}")


def resolve_kv_dtype(name: str, model: ModelSpec, model_dtype: str | None = None) -> KVDtype:
    """`auto` is the model dtype, as vLLM does; a named dtype is looked up."""
    key = name.strip().lower()
    if key == "auto":
        dt = model_dtype or model.dtype
        return KVDtype(dt, MODEL_DTYPES[dt], note="auto: the model dtype")
    if key not in KV_DTYPES:
        valid = ", ".join(("auto", *KV_DTYPES))
        raise PlanError(f"{named('kv_dtype')} {name!r} is not known; valid: {valid}")
    dt = KV_DTYPES[key]
    if dt.mla_only and not model.mla:
        raise PlanError(f"{named('kv_dtype')} {key} is only for MLA models; {model.name} uses {model.attention}")
    return dt


def layer_spec(layer: LayerArch, tp: int, cache: CacheSettings) -> CacheSpec:
    """The cache spec one TP rank holds for one layer module."""
    bs = cache.block_size
    dt = cache.kv_dtype
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
        return MambaSpec(block_size=bs, tensors=tuple(tensors), num_speculative_blocks=cache.num_speculative_blocks)
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

    @property
    def bytes_per_token(self) -> int:
        return sum(s.bytes_per_token for _, s in self.specs if s.kind != "cross")

    @property
    def state_bytes_per_request(self) -> int:
        return sum(s.state_bytes for _, s in self.specs)


def stage_specs(model: ModelSpec, plan: ParallelPlan, cache: CacheSettings) -> list[StageSpecs]:
    heads, replicated = check_tp(model, plan.tp)
    ranges = pp_ranges(model.num_layers, plan.pp, plan.pp_layers)
    out = []
    for pp_rank, (start, end) in enumerate(ranges):
        specs = tuple(
            (layer, layer_spec(layer, plan.tp, cache)) for layer in model.layers if start <= layer.layer < end
        )
        out.append(StageSpecs(pp_rank, (start, end), specs, heads, replicated))
    return out


@record
class Traffic:
    """Cached positions of each request at the moment measured."""

    requests: tuple[int, ...]
    description: str = ""

    def __post_init__(self) -> None:
        for t in self.requests:
            if not isinstance(t, int) or t < 0:
                raise PlanError(f"token counts must be non-negative integers, got {t!r}")

    @property
    def tokens(self) -> int:
        return sum(self.requests)


@record
class Measures:
    """The seed's three request-side measures for a set of cache specs."""

    effective_bytes: int
    block_rounded_bytes: int
    empty_slot_bytes: int
    state_bytes: int  # per-request recurrent state included in both measures above


def measure(specs: tuple[tuple[LayerArch, CacheSpec], ...], traffic: Traffic) -> Measures:
    eff = rounded = state = 0
    # equal lengths measured once: a batch of 10**6 equal requests is one length
    lengths: dict[int, int] = {}
    for t in traffic.requests:
        lengths[t] = lengths.get(t, 0) + 1
    live = sum(n for t, n in lengths.items() if t)
    for _, spec in specs:
        if spec.kind == "mamba":
            per = spec.state_bytes
            state += per * live
            eff += per * live
            rounded += per * live
            continue
        bpt = spec.bytes_per_token
        bs = spec.block_size
        for t, n in lengths.items():
            eff += spec.held_tokens(t) * bpt * n
            rounded += spec.held_blocks(t) * bs * bpt * n
    return Measures(eff, rounded, rounded - eff, state)


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
    logical: Measures  # one replica, no TP replication (one copy of every KV head)
    bytes_per_token: int  # one replica, no replication, every attention layer
    state_bytes_per_request: int
    ranks: tuple[RankFootprint, ...]
    allocated_tokens: int  # sum over requests of ceil(t / block) * block

    @property
    def tokens(self) -> int:
        return self.traffic.tokens

    def _largest(self, attr: str) -> int:
        return max((getattr(r, attr) for r in self.ranks), default=0)

    @property
    def bytes_per_token_per_rank(self) -> int:
        return self._largest("bytes_per_token")

    @property
    def effective_bytes_per_rank(self) -> int:
        return self._largest("effective_bytes")

    @property
    def block_rounded_bytes_per_rank(self) -> int:
        return self._largest("block_rounded_bytes")

    def replica_total(self, attr: str) -> int:
        """Sum over the ranks of one DP replica, TP replicas included."""
        return sum(getattr(r, attr) for r in self.ranks if r.dp_rank == 0)

    def deployment_total(self, attr: str) -> int:
        return sum(getattr(r, attr) for r in self.ranks)


def footprint(model: ModelSpec, plan: ParallelPlan, cache: CacheSettings, traffic: Traffic) -> Footprint:
    stages = stage_specs(model, plan, cache)
    logical_specs = tuple((layer, layer_spec(layer, 1, cache)) for layer in model.layers)
    logical = measure(logical_specs, traffic)
    stage_measures = [measure(st.specs, traffic) for st in stages]
    ranks = []
    for rid in rank_ids(plan):
        st = stages[rid.pp_rank]
        m = stage_measures[rid.pp_rank]
        ranks.append(
            RankFootprint(
                global_rank=rid.global_rank,
                local_rank=rid.local_rank,
                node=rid.node,
                dp_rank=rid.dp_rank,
                pp_rank=rid.pp_rank,
                tp_rank=rid.tp_rank,
                layers=st.layers,
                kv_heads=st.kv_heads,
                replicated=st.replicated,
                bytes_per_token=st.bytes_per_token,
                state_bytes_per_request=st.state_bytes_per_request,
                effective_bytes=m.effective_bytes,
                block_rounded_bytes=m.block_rounded_bytes,
            )
        )
    bs = cache.block_size
    return Footprint(
        model=model,
        plan=plan,
        cache=cache,
        traffic=traffic,
        stages=tuple(stages),
        logical=logical,
        bytes_per_token=sum(s.bytes_per_token for _, s in logical_specs if s.kind != "cross"),
        state_bytes_per_request=sum(s.state_bytes for _, s in logical_specs),
        ranks=tuple(ranks),
        allocated_tokens=sum(cdiv(t, bs) * bs for t in traffic.requests),
    )
