"""vLLM's KV cache groups: which layers share a block table, and the page-size
unification that makes a hybrid model's layers fit one pool.

Mirrors vLLM 0.33 ``v1/core/kv_cache_planning.py`` (``get_kv_cache_groups``,
``unify_kv_cache_spec_page_size``) and the ``--disable-hybrid-kv-cache-manager`` promotion.
Pure: no I/O.
"""

from __future__ import annotations

from kvcalc.core.record import record
from kvcalc.core.specs import (
    AttentionSpec,
    CacheSpec,
    ChunkedLocalSpec,
    MambaSpec,
    MLASpec,
    SlidingWindowSpec,
    cdiv,
)
from kvcalc.errors import PlanError, named


@record
class Group:
    """One KV cache group: layers sharing a block table (vLLM ``KVCacheGroupSpec``)."""

    kind: str
    layers: tuple[int, ...]  # indices into the model's cache-layer list
    specs: tuple[CacheSpec, ...]  # the spec of each layer (UniformType: they differ in page)
    uniform_type: bool = False

    @property
    def spec(self) -> CacheSpec:
        return self.specs[0]

    @property
    def block_size(self) -> int:
        return self.specs[0].block_size

    def blocks_per_request(self, max_model_len: int, in_flight: int) -> int:
        """cdiv(max_memory_usage_bytes, page): blocks one request of max_model_len takes."""
        if self.uniform_type:
            return max(cdiv(s.max_memory_usage_bytes(max_model_len, in_flight), s.page_size_bytes) for s in self.specs)
        s = self.specs[0]
        return cdiv(s.max_memory_usage_bytes(max_model_len, in_flight), s.page_size_bytes)


def _promote_local(specs: list[CacheSpec]) -> list[CacheSpec]:
    """--disable-hybrid-kv-cache-manager: sliding/chunked layers are allocated as full."""
    kinds = {s.kind for s in specs}
    if len(kinds) == 1:
        return specs
    if "cross" in kinds or "mamba" in kinds:  # vllm==0.33.0: vllm/v1/core/kv_cache_planning.py:810-814
        what = "cross-attention" if "cross" in kinds else "mamba"
        raise PlanError(
            f"{named('disable_hybrid_kv_cache_manager')}: vLLM cannot allocate {what} and attention layers as one type "
            "and raises 'Failed to promote local KV cache specs to one unified type.'; drop the flag"
        )
    if "full" not in kinds:
        raise PlanError(f"{named('disable_hybrid_kv_cache_manager')} needs full-attention layers to unify with; drop the flag")
    return [as_full(s) if isinstance(s, (SlidingWindowSpec, ChunkedLocalSpec)) else s for s in specs]


def as_full(s: CacheSpec) -> CacheSpec:
    """A sliding-window or chunked-local layer allocated as full attention."""
    assert isinstance(s, AttentionSpec)
    return AttentionSpec(
        block_size=s.block_size,
        num_kv_heads=s.num_kv_heads,
        head_size=s.head_size,
        head_size_v=s.head_size_v,
        dtype_bytes=s.dtype_bytes,
        scale_bytes_per_head=s.scale_bytes_per_head,
        token_bytes_override=s.token_bytes_override,
    )


def _unify_page_size(specs: list[CacheSpec]) -> list[CacheSpec]:
    """vLLM ``unify_kv_cache_spec_page_size``: smaller attention pages get a larger block
    size when the ratio is whole, else padding (not MLA); mamba pages are padded."""
    pages = {s.page_size_bytes for s in specs}
    if len(pages) <= 1:
        return specs
    top = max(pages)
    out: list[CacheSpec] = []
    for s in specs:
        if s.page_size_bytes == top:
            out.append(s)
        elif isinstance(s, MambaSpec):
            out.append(s.with_padding(top))
        elif top % s.page_size_bytes == 0:
            out.append(s.with_block_size(s.block_size * (top // s.page_size_bytes)))
        elif not isinstance(s, MLASpec):
            out.append(s.with_padding(top))
        else:
            raise PlanError("vLLM cannot unify this model's page sizes (an MLA page does not divide the largest page)")
    return out


def group_layers(
    specs: list[CacheSpec], *, disable_hybrid: bool = False, ratio: int = 150
) -> tuple[list[Group], list[CacheSpec], str]:
    """vLLM ``get_kv_cache_groups`` on the whole model's layers (all PP stages merged).

    Returns the groups, the (possibly unified) per-layer specs, and the rule that applied.
    ``ratio`` (hundredths, ``RuleLine.group_ratio``): layers per group is the largest type's
    count when it is under ratio x the smallest's, else the smallest's; 0: always the smallest
    (0.9.1-0.11.x), 125 (0.12.0-0.17.x), 150 (0.18.0-).
    """
    if disable_hybrid:
        specs = _promote_local(specs)
    if not specs:
        return [], specs, "attention-free"
    if all(s == specs[0] for s in specs):
        return [Group(specs[0].kind, tuple(range(len(specs))), tuple(specs))], specs, "uniform"
    keys = {s.type_key for s in specs}
    if len(keys) == 1 and not isinstance(specs[0], MambaSpec):
        return (
            [Group(specs[0].kind, tuple(range(len(specs))), tuple(specs), uniform_type=True)],
            specs,
            "uniform type (one group, layers differ in page size)",
        )
    specs = _unify_page_size(specs)
    buckets: dict[CacheSpec, list[int]] = {}
    for i, s in enumerate(specs):
        buckets.setdefault(s, []).append(i)
    sizes = [len(v) for v in buckets.values()]
    group_size = min(sizes)
    if max(sizes) * 100 < group_size * ratio:
        group_size = max(sizes)
    groups: list[Group] = []
    for spec, layers in buckets.items():
        n = cdiv(len(layers), group_size)
        for i in range(n):
            members = tuple(layers[i::n])
            groups.append(Group(spec.kind, members, tuple(specs[j] for j in members)))
    return groups, specs, f"hybrid: groups of {group_size} layers sharing one page size"
