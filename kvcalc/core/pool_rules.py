"""The pool's per-release rules applied: what each ``RuleLine`` field changes in vLLM's numbers.

- the specs vLLM builds (no sliding-window spec before 0.8.3, no chunked-local spec before
  0.10.0) and when its hybrid manager is off (mixed layers before 0.9.1, chunked-local layers
  0.10.1-0.13.0), promoting sliding/chunked layers to full attention;
- the fit check's need and memory (per worker / whole model / first group / null block);
- "GPU KV cache size" tokens and the maximum concurrency.

Citations: docs/vllm-releases.md sections 1-4 (file and line in each wheel). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvcalc.core import vllm_rules as R
from kvcalc.core.grouping import Group, as_full
from kvcalc.core.specs import CacheSpec, ChunkedLocalSpec, SlidingWindowSpec, cdiv

Need = Callable[[int], int]


def release_spec(spec: CacheSpec, rules: R.RuleLine) -> CacheSpec:
    """The spec the release's model runner builds for a layer: a sliding layer is full
    attention before 0.8.3 (vllm==0.8.2: vllm/v1/worker/gpu_model_runner.py:1604), a
    chunked-local one before 0.10.0 (absent in vllm==0.9.2: vllm/v1/kv_cache_interface.py)."""
    if isinstance(spec, SlidingWindowSpec) and rules.sliding == R.SW_ALL_FULL:
        return as_full(spec)
    if isinstance(spec, ChunkedLocalSpec) and rules.chunked == R.CHUNKED_FULL:
        return as_full(spec)
    return spec


def promotes(specs: Sequence[CacheSpec], rules: R.RuleLine, disable_hybrid: bool) -> bool:
    """Whether the hybrid manager is off, so sliding/chunked layers are allocated as full:
    the flag; mixed layer kinds before 0.9.1 (vllm==0.8.3: kv_cache_utils.py:601-625);
    chunked-local layers 0.10.1-0.13.0 (vllm==0.10.1: vllm/config/__init__.py:3675)."""
    if disable_hybrid:
        return True
    kinds = {s.kind for s in specs}
    if not rules.hybrid_groups and len(kinds) > 1:
        return True
    return rules.chunked == R.CHUNKED_PROMOTED and "chunked" in kinds


def _first_group_blocks(groups: Sequence[Group], L: int, f: int) -> int:
    return groups[0].blocks_per_request(L, f)


def _uniform_type_need(groups: Sequence[Group], on: set[int] | None, L: int, f: int) -> int:
    g = groups[0]
    return sum(s.max_memory_usage_bytes(L, f) for j, s in zip(g.layers, g.specs) if on is None or j in on)


def need_function(
    rules: R.RuleLine,
    groups: Sequence[Group],
    raw: Sequence[CacheSpec],
    bpb: int,
    whole_bpb: int,
    on: set[int],
    f: int,
) -> Need:
    """The bytes one request of length n needs in the release's fit check, for one worker
    (``raw``: the worker's layer specs before grouping, ``bpb``: its bytes per block)."""
    check = rules.fit_check
    if check in (R.FIT_MIN_ALL, R.FIT_WORKER):  # sum over the worker's layers (kv_cache_utils.py:704 in 0.11.0)
        return lambda n: sum(s.max_memory_usage_bytes(n, f) for s in raw)
    uniform_type = len(groups) == 1 and groups[0].uniform_type
    if check == R.FIT_WHOLE_MODEL:  # every layer of the model, groups[0]'s blocks (vllm==0.14.0: :1318-1351)
        if uniform_type:
            return lambda n: _uniform_type_need(groups, None, n, f)
        return lambda n: whole_bpb * _first_group_blocks(groups, n, f)
    if uniform_type:
        return lambda n: _uniform_type_need(groups, on, n, f)
    if check == R.FIT_FIRST_GROUP:  # the worker's groups, groups[0]'s blocks only (vllm==0.17.0: :1558-1576)
        return lambda n: bpb * _first_group_blocks(groups, n, f)
    # FIT_GROUPS, FIT_NULL_BLOCK: the sum over the groups (vllm==0.19.0: :1362; vllm==0.29.0: :2041-2070)
    return lambda n: bpb * sum(g.blocks_per_request(n, f) for g in groups)


def check_memory(rules: R.RuleLine, available: int, all_available: Sequence[int], bpb: int) -> int:
    """The memory the fit check compares with: the smallest worker's in 0.8.0-0.8.1 and
    0.14.0-0.16.x; less one block (the null block) from 0.29.0 (vllm==0.29.0: :2316-2320)."""
    if rules.fit_check in (R.FIT_MIN_ALL, R.FIT_WHOLE_MODEL):
        return min(all_available)
    if rules.fit_check == R.FIT_NULL_BLOCK:
        return available - bpb
    return available


def estimate(need: Need, memory: int, L: int) -> int:
    """Largest length in [1, L] whose need fits ``memory`` (binary search, 0 if none)."""
    if memory <= 0 or need(1) > memory:
        return 0
    lo, hi, best = 1, L, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if need(mid) <= memory:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def concurrency(rules: R.RuleLine, num_blocks: int, groups: Sequence[Group], L: int, f: int) -> float:
    """"Maximum concurrency for L tokens per request" (docs/vllm-releases.md section 2)."""
    if rules.concurrency == R.CONC_TOKENS:  # blocks x bs / L (vllm==0.8.0: kv_cache_utils.py:539)
        return num_blocks * groups[0].block_size / L
    if rules.concurrency == R.CONC_POOLED:  # cdiv of the summed need (vllm==0.20.2: kv_cache_utils.py:872-890)
        if len(groups) == 1 and groups[0].uniform_type:
            g = groups[0]
            per = cdiv(sum(s.max_memory_usage_bytes(L, f) for s in g.specs), sum(s.page_size_bytes for s in g.specs))
        else:
            per = cdiv(sum(g.spec.max_memory_usage_bytes(L, f) for g in groups), groups[0].spec.page_size_bytes)
        return num_blocks / per
    return num_blocks / sum(g.blocks_per_request(L, f) for g in groups)  # 0.27.0-: per-group cdivs


def size_tokens(rules: R.RuleLine, num_blocks: int, groups: Sequence[Group], conc: float, L: int) -> int:
    """"GPU KV cache size: N tokens" (docs/vllm-releases.md section 1)."""
    if rules.tokens == R.TOKENS_BLOCKS:
        return num_blocks * groups[0].block_size
    if rules.tokens in (R.TOKENS_PER_GROUP, R.TOKENS_PER_GROUP_MIN_BS):
        return num_blocks // len(groups) * min(g.block_size for g in groups)
    return int(conc * L)
