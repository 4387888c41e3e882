"""The layout vLLM 0.33 gives one rank's KV pool, worked out without torch: which layers the
probe allocates, where each starts in the one backing buffer, how many blocks it holds.

Layer-outermost within each KV cache group (each layer owns ``page x num_blocks`` bytes);
the groups overlay each other from byte 0, so the buffer is the largest group's sum of pages
times the blocks. See :mod:`kvcalc.probe.alloc` for the allocation this plans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvcalc.core.specs import CacheSpec, MambaSpec, cdiv
from kvcalc.errors import KvcalcError

DEFAULT_TOKENS = 4096


@dataclass(frozen=True)
class LayerPlan:
    name: str  # "layer 3 (full)"
    layer: int
    kind: str
    spec: CacheSpec
    group: int
    offset: int  # bytes into the backing buffer


@dataclass(frozen=True)
class AllocPlan:
    model: str
    pp_rank: int
    tp: int
    pp: int
    rank_layers: int  # cache-holding modules on the rank
    layers: tuple[LayerPlan, ...]  # the probed ones
    num_blocks: int
    block_size: int
    bytes_per_block: int  # probed layers
    rank_bytes_per_block: int  # every layer of the rank
    kv_dtype: str
    state_dtype: str
    rule: str
    notes: tuple[str, ...]

    @property
    def backing_bytes(self) -> int:
        return self.bytes_per_block * self.num_blocks

    @property
    def rank_backing_bytes(self) -> int:
        return self.rank_bytes_per_block * self.num_blocks


def plan_allocation(resolved: Any, settings: Any, *, layers: int | None, blocks: int | None,
                    tokens: int | None, pp_rank: int | None) -> AllocPlan:
    """The layout vLLM 0.33 gives the probed layers of one rank (pure: no torch)."""
    from kvcalc.app.service import cache_settings, check_version, default_block_size, model_dtype
    from kvcalc.app.service import plan as make_plan
    from kvcalc.core.pool import engine_cache, group_layers

    model = resolved.spec
    check_version(settings)
    cache = cache_settings(model, settings, block_size=default_block_size(model, settings))
    p = make_plan(settings)
    cache, mamba_pad, notes = engine_cache(model, p, cache)
    keys, specs, on_stage = _stage_layers(model, p, cache, mamba_pad)
    groups, specs, rule = group_layers(specs, disable_hybrid=settings.disable_hybrid_kv_cache_manager)
    group_of = {j: gi for gi, g in enumerate(groups) for j in g.layers}

    def bpb(members: set[int]) -> int:
        return max(sum(specs[j].page_size_bytes for j in g.layers if j in members) for g in groups)

    pp_rank = _pick_rank(pp_rank, [bpb(set(mine)) for mine in on_stage], p.pp)
    rank = on_stage[pp_rank]
    probed = _probed_layers(rank, layers, pp_rank)
    num_blocks = _num_blocks(blocks, tokens, cache.block_size)
    offsets = _offsets(groups, specs, probed, num_blocks)
    plans = tuple(
        LayerPlan(f"layer {keys[j][0]} ({keys[j][1]})", keys[j][0], keys[j][1], specs[j], group_of[j], offsets[j])
        for j in probed
    )
    return AllocPlan(
        model=model.name,
        pp_rank=pp_rank,
        tp=p.tp,
        pp=p.pp,
        rank_layers=len(rank),
        layers=plans,
        num_blocks=num_blocks,
        block_size=cache.block_size,
        bytes_per_block=bpb(set(probed)),
        rank_bytes_per_block=bpb(set(rank)),
        kv_dtype=cache.kv_dtype.name,
        state_dtype=model_dtype(model, settings),
        rule=rule,
        notes=tuple(notes),
    )


def _stage_layers(model: Any, p: Any, cache: Any,
                  mamba_pad: int | None) -> tuple[list[tuple[int, str]], list[CacheSpec], list[list[int]]]:
    """Every cache layer of every PP stage: its (layer, kind), its spec (mamba pages padded as
    the engine pads them) and, per stage, the indices of its layers."""
    from kvcalc.core.footprint import stage_specs

    keys: list[tuple[int, str]] = []
    specs: list[CacheSpec] = []
    on_stage: list[list[int]] = []
    for st in stage_specs(model, p, cache):
        mine = []
        for layer, spec in st.specs:
            if mamba_pad and isinstance(spec, MambaSpec):
                spec = spec.with_padding(mamba_pad)
            keys.append((layer.layer, layer.kind))
            specs.append(spec)
            mine.append(len(specs) - 1)
        on_stage.append(mine)
    if not specs:
        raise KvcalcError(f"{model.name} has no KV cache layers: nothing to allocate")
    return keys, specs, on_stage


def _pick_rank(pp_rank: int | None, stage_bytes_per_block: list[int], pp: int) -> int:
    """The PP rank asked for, else the one with most bytes per block (the first on a tie)."""
    stages = len(stage_bytes_per_block)
    if pp_rank is None:
        return max(range(stages), key=lambda r: (stage_bytes_per_block[r], -r))
    if not 0 <= pp_rank < stages:
        raise KvcalcError(f"--pp-rank {pp_rank} is out of range; valid: 0..{stages - 1} (--pp {pp})")
    return pp_rank


def _probed_layers(rank: list[int], layers: int | None, pp_rank: int) -> list[int]:
    if layers is None:
        return rank
    if layers < 1:
        raise KvcalcError(f"--layers must be a positive integer, got {layers}")
    if layers > len(rank):
        raise KvcalcError(f"--layers {layers}: PP rank {pp_rank} holds only {len(rank)} cache layers")
    return rank[:layers]


def _num_blocks(blocks: int | None, tokens: int | None, block_size: int) -> int:
    if blocks is not None and tokens is not None:
        raise KvcalcError("give --blocks or --tokens, not both")
    if blocks is not None:
        if blocks < 1:
            raise KvcalcError(f"--blocks must be a positive integer, got {blocks}")
        return blocks
    t = DEFAULT_TOKENS if tokens is None else tokens
    if t < 0:
        raise KvcalcError(f"--tokens must be a non-negative integer, got {t}")
    return cdiv(t, block_size) + 1  # + vLLM's null block (block 0, never handed out)


def _offsets(groups: Any, specs: list[CacheSpec], probed: list[int], num_blocks: int) -> dict[int, int]:
    """Layer-outermost within each group; groups overlay from byte 0."""
    offsets: dict[int, int] = {}
    for g in groups:
        at = 0
        for j in g.layers:
            if j in probed:
                offsets[j] = at
                at += specs[j].page_size_bytes * num_blocks
    return offsets
