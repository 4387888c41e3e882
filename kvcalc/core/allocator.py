"""PyTorch's CUDA caching allocator, as far as it decides what vLLM's weights figure counts.

vLLM's "Model loading took X GiB" (and the weights term of its budget) is the change of
``torch.cuda.max_memory_allocated`` across loading, after ``empty_cache`` and a peak reset
(vllm==0.11.0: platforms/cuda.py:206-211, utils/__init__.py:1143-1159; the same in every release
0.9.2-0.33.0). ``allocated`` counts the size of each block the allocator hands out, and a block
is not always the size asked for. The rules (pytorch/pytorch, commit 001074d:
c10/cuda/CUDACachingAllocator.cpp, the constants at its top, ``round_size``,
``get_allocation_size``, ``should_split`` and the best-fit ``get_free_block``):

- every request is rounded up to a multiple of 512 B (kMinBlockSize);
- requests up to 1 MiB (kSmallSize) come from 2 MiB segments and are split off exactly;
- a larger request takes the smallest free cached block that fits, or a new segment: 20 MiB
  (kLargeBuffer) below 10 MiB (kMinLargeAlloc), else the request rounded up to 2 MiB (kRoundLarge);
- the block is split only when more than 1 MiB would remain (large pool, with the default
  max_split_size and without expandable segments: vLLM sets neither); otherwise the whole block is
  handed out and counted. With ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` in its environment
  (a user's choice; vLLM refuses it only beside a KV connector without the cumem allocator,
  vllm==0.25.0 config/vllm.py:834-866) every block is split down to the 512 B rounding, so nothing is
  added (``should_split``: remaining >= kMinBlockSize for the small pool or with expandable segments;
  ``--expandable-segments``: kvcalc.core.weights leaves the slack out).

So a weight of 31.5 MiB is counted as 32 MiB, one of 24.5 MiB as 24.5 MiB (1.5 MiB stays free),
one of exactly 48 MiB as 48 MiB. Pure: stdlib only, bytes as integers.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable

MIB = 1 << 20
MIN_BLOCK = 512
SMALL_SIZE = MIB
SMALL_BUFFER = 2 * MIB
LARGE_BUFFER = 20 * MIB
MIN_LARGE_ALLOC = 10 * MIB
ROUND_LARGE = 2 * MIB


def round_size(size: int) -> int:
    """The request as the allocator books it: a multiple of 512 B, at least 512 B."""
    return max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)


def segment_size(size: int) -> int:
    """The cudaMalloc a request of ``size`` (already rounded) opens when no cached block fits."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def allocated_bytes(sizes: Iterable[int]) -> int:
    """``allocated`` after requesting ``sizes`` in order and freeing none of them (a model's
    parameters while it is built)."""
    free: list[int] = []  # free large blocks, sorted by size
    total = 0
    for request in sizes:
        size = round_size(request)
        if size <= SMALL_SIZE:
            total += size  # split off a small segment exactly (remainder >= 512 B is split)
            continue
        i = bisect_left(free, size)
        block = free.pop(i) if i < len(free) else segment_size(size)
        if block - size > SMALL_SIZE:
            insort(free, block - size)
            total += size
        else:
            total += block
    return total
