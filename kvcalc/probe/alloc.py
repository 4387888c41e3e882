"""Check 1: allocate one rank's KV pool exactly as vLLM 0.33 lays it out, and measure it.

vLLM 0.33 (``v1/worker/utils.py:allocate_kv_cache``, ``v1/kv_cache_interface.py``) no longer
allocates one tensor per layer: it allocates ONE int8 backing buffer of
``bytes_per_block x num_blocks`` bytes (``torch.zeros(size, dtype=torch.int8)``) and views it,
per layer, as a 4-D ``[B, H, N, C]`` tensor: B blocks, H KV heads, N tokens per block and C
the bytes of one (head, token) cell, K and V side by side (``(head_size + head_size_v) x
dtype``), re-viewed as the cache dtype. The default layout ``LBNHC`` (FlashAttention declares
no preference, so vLLM's first default applies) is layer-outermost: each layer of a group owns
a region of ``page x num_blocks`` bytes with blocks ``page`` bytes apart and, inside a block,
tokens outside heads. KV cache groups overlay each other from byte 0, so the buffer is the
largest group's sum of pages times the blocks. MLA layers are ``[B, 1, N, 576]`` (the latent,
no separate V); mamba layers are one page of state tensors per block.

The layout is worked out without torch (:mod:`kvcalc.probe.layout`); the probe then
allocates it on the chosen device and compares:

- the backing storage (``untyped_storage().nbytes()``) with ``bytes_per_block x num_blocks``;
- every layer view's bytes (``numel x element_size``) with ``page x num_blocks``, and the
  highest byte any view addresses with the buffer size (the layout needs exactly that buffer);
- CUDA: the deltas of ``torch.cuda.memory_allocated()`` and ``memory_reserved()`` with the
  caching allocator's rounding (blocks of 512 B; segments of 2 MiB for requests up to 1 MiB,
  20 MiB below 10 MiB, else the request rounded up to 2 MiB);
- CPU: the process's resident anonymous memory (RssAnon) after ``torch.zeros`` has touched
  every page, within two pages (two 2 MiB huge pages where THP is ``always``) plus 256 KiB for
  the interpreter's own allocations in between.
"""

from __future__ import annotations

import gc
from typing import Any

from kvcalc.app.probe_report import AllocFacts, Check, Row
from kvcalc.core.specs import AttentionSpec, MambaSpec, cdiv
from kvcalc.probe import env
from kvcalc.probe.layout import AllocPlan, LayerPlan, plan_allocation

MIB = 1 << 20
CPU_HEADROOM = 256 * MIB  # left free on the host for everything else
CUDA_HEADROOM = 64 * MIB
NOISE = 256 * 1024  # interpreter allocations between the two RSS readings

# vLLM STR_DTYPE_TO_TORCH_DTYPE: what the cache tensor is viewed as, per --kv-cache-dtype
KV_TORCH_DTYPE = {
    "float32": "float32",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "fp8": "uint8",
    "fp8_e4m3": "uint8",
    "fp8_e5m2": "uint8",
    "fp8_inc": "float8_e4m3fn",
    "fp8_per_token_head": "uint8",
    "int8_per_token_head": "int8",
    "fp8_ds_mla": "uint8",
}

# PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp)
K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 * MIB
K_SMALL_BUFFER = 2 * MIB
K_MIN_LARGE_ALLOC = 10 * MIB
K_ROUND_LARGE = 2 * MIB
K_LARGE_BUFFER = 20 * MIB


def round_up(n: int, m: int) -> int:
    return cdiv(n, m) * m


def cuda_allocator_prediction(size: int) -> tuple[int, int]:
    """(memory_allocated delta, memory_reserved delta) of one fresh allocation of ``size``
    bytes with an empty cache, by the caching allocator's rules:
    round_size: up to a multiple of 512 B; segment: 2 MiB (small pool) for <= 1 MiB, 20 MiB
    below 10 MiB, else rounded up to 2 MiB; the block is split off its segment when the
    rest is >= 512 B (small pool) or > 1 MiB (large pool), else the whole segment counts
    as allocated. Example: 12,582,913 B -> 12,583,424 B (512 B blocks) in a 14 MiB segment,
    rest 2,096,640 B > 1 MiB, so allocated 12,583,424 and reserved 14,680,064."""
    rounded = K_MIN_BLOCK if size < K_MIN_BLOCK else round_up(size, K_MIN_BLOCK)
    if rounded <= K_SMALL_SIZE:
        segment, small = K_SMALL_BUFFER, True
    elif rounded < K_MIN_LARGE_ALLOC:
        segment, small = K_LARGE_BUFFER, False
    else:
        segment, small = round_up(rounded, K_ROUND_LARGE), False
    rest = segment - rounded
    split = rest >= K_MIN_BLOCK if small else rest > K_SMALL_SIZE
    return (rounded if split else segment), segment


def _torch_dtype(torch: Any, name: str, notes: list[str]) -> Any:
    dt = getattr(torch, name, None)
    if dt is None:  # an old torch without float8 types: the bytes are the same
        notes.append(f"this torch has no {name}; the cache is viewed as uint8 (same bytes per element)")
        return torch.uint8
    return dt


def _views(torch: Any, buf: Any, plan: AllocPlan, notes: list[str]) -> list[tuple[LayerPlan, list[Any]]]:
    """Per layer, the tensors vLLM would hand the attention/mamba layer."""
    kv_dt = _torch_dtype(torch, KV_TORCH_DTYPE.get(plan.kv_dtype, plan.kv_dtype), notes)
    st_dt = _torch_dtype(torch, plan.state_dtype, notes)
    B = plan.num_blocks
    out = []
    for lp in plan.layers:
        s = lp.spec
        stride_b = s.page_size_bytes  # a padded page keeps blocks page_size_padded apart
        if isinstance(s, AttentionSpec):
            H = s.num_kv_heads
            N = s.block_size
            C = s.bytes_per_token // H  # bytes of one (head, token) cell: K and V (and scales)
            # logical [B, H, N, C], physical LBNHC: tokens outside heads inside a block
            raw = torch.as_strided(buf, (B, H, N, C), (stride_b, C, H * C, 1), lp.offset)
            dt = kv_dt if C % kv_dt.itemsize == 0 else torch.uint8
            out.append((lp, [raw.view(dt)]))
        else:  # mamba: one page of state tensors per block
            assert isinstance(s, MambaSpec)
            tensors = []
            at = lp.offset
            for t in s.tensors:
                shape = tuple(t.shape)
                isz = t.dtype_bytes
                byte_shape = (B, *shape[:-1], shape[-1] * isz)
                strides = [1]
                for d in reversed(byte_shape[2:]):
                    strides.insert(0, strides[0] * d)
                raw = torch.as_strided(buf, byte_shape, (stride_b, *strides), at)
                dt = st_dt if st_dt.itemsize == isz else {1: torch.uint8, 2: torch.bfloat16, 4: torch.float32}[isz]
                tensors.append(raw.view(dt))
                at += t.nbytes
            out.append((lp, tensors))
    return out


def _tensor_bytes(t: Any) -> int:
    return t.numel() * t.element_size()


def _highest_byte(t: Any) -> int:
    """One past the last byte a (strided) view addresses in its storage."""
    span = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return (t.storage_offset() + span) * t.element_size()


def check_free_memory(plan: AllocPlan, device: str) -> None:
    need = plan.backing_bytes
    from kvcalc.core.units import format_bytes

    if device == "cpu":
        avail = env.meminfo_available()
        if avail is None:
            raise env.cannot("--device cpu: this system has no /proc/meminfo, so the probe cannot tell free memory")
        if need + CPU_HEADROOM > avail:
            raise env.cannot(
                f"--device cpu: the probe would allocate {format_bytes(need)} but the host has "
                f"{format_bytes(avail)} available (MemAvailable, keeping {format_bytes(CPU_HEADROOM)} free); "
                "lower --tokens/--blocks or probe fewer layers with --layers N"
            )
        return
    torch = env.need_torch()
    free, _total = torch.cuda.mem_get_info(torch.device(device))
    if need + CUDA_HEADROOM > free:
        raise env.cannot(
            f"--device {device}: the probe would allocate {format_bytes(need)} but the GPU has "
            f"{format_bytes(free)} free (cudaMemGetInfo, keeping {format_bytes(CUDA_HEADROOM)} free); "
            "lower --tokens/--blocks or probe fewer layers with --layers N"
        )


def probe_allocation(resolved: Any, settings: Any, *, device: str, layers: int | None = None,
                     blocks: int | None = None, tokens: int | None = None, pp_rank: int | None = None) -> Check:
    plan = plan_allocation(resolved, settings, layers=layers, blocks=blocks, tokens=tokens, pp_rank=pp_rank)
    torch = env.need_torch()
    device = env.resolve_device(device)
    check_free_memory(plan, device)
    notes: list[str] = list(plan.notes)
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    pinned = False
    if not cuda:
        pinned = env.pin_mmap_threshold()
    _warm_up(torch, dev, cuda)
    before = _counters(torch, dev, cuda, fresh=True)
    buf = torch.zeros(plan.backing_bytes, dtype=torch.int8, device=dev)  # as vLLM: zeros, int8
    after = _counters(torch, dev, cuda)
    try:
        views = _views(torch, buf, plan, notes)
        rows = _rows(torch, buf, plan, views)
    finally:
        storage = buf.untyped_storage().nbytes()
    rows.insert(0, _storage_row(plan, storage))
    if cuda:
        rows += _cuda_rows(plan, before, after)
    elif before[0] is not None and after[0] is not None:
        rows.append(_rss_row(plan, after[0] - before[0], pinned))
    else:
        notes.append("no /proc/self/status here: the resident-memory measurement is skipped")
    if len(plan.layers) < plan.rank_layers:  # the whole rank, from the probed layers
        rows.append(_rank_row(plan, storage))
    del views, buf
    if cuda:
        torch.cuda.empty_cache()
    gc.collect()
    return _alloc_check(plan, device, rows, notes)


def _warm_up(torch: Any, dev: Any, cuda: bool) -> None:
    """The first CPU/CUDA op loads kernels and code pages, and on the CPU a fill this large
    starts the intra-op thread pool (its stacks are resident memory): keep both out of the deltas."""
    w = torch.zeros(4 * MIB if not cuda else 4096, dtype=torch.int8, device=dev)
    torch.as_strided(w, (2, 2, 2, 8), (64, 8, 16, 1), 0).view(torch.bfloat16)
    del w
    gc.collect()


def _counters(torch: Any, dev: Any, cuda: bool, *, fresh: bool = False) -> tuple[int | None, int | None]:
    """CUDA: (memory_allocated, memory_reserved), the cache emptied first when ``fresh``;
    CPU: (RssAnon, None)."""
    if not cuda:
        return env.rss_anon(), None
    torch.cuda.synchronize(dev)
    if fresh:
        torch.cuda.empty_cache()
    return torch.cuda.memory_allocated(dev), torch.cuda.memory_reserved(dev)


def _storage_row(plan: AllocPlan, storage: int) -> Row:
    return Row(
        "backing buffer: storage bytes",
        plan.backing_bytes,
        storage,
        note=f"untyped_storage().nbytes() of one int8 buffer of bytes_per_block {plan.bytes_per_block:,} x {plan.num_blocks:,} blocks",
    )


def _cuda_rows(plan: AllocPlan, before: tuple[int | None, int | None],
               after: tuple[int | None, int | None]) -> list[Row]:
    a0, r0 = before
    a1, r1 = after
    assert a0 is not None and r0 is not None and a1 is not None and r1 is not None
    pa, pr = cuda_allocator_prediction(plan.backing_bytes)
    expandable = "expandable_segments:true" in _alloc_conf().replace(" ", "").lower()
    small = plan.backing_bytes <= K_SMALL_SIZE
    tol = K_LARGE_BUFFER if expandable else (K_SMALL_BUFFER if small else 0)
    return [
        Row(
            "torch.cuda.memory_allocated() delta",
            pa,
            a1 - a0,
            tolerance=K_ROUND_LARGE if expandable else 0,
            note="the caching allocator counts whole 512 B blocks (the full segment when the rest is too small to split)"
            + ("; expandable segments split differently: within 2 MiB" if expandable else ""),
        ),
        Row(
            "torch.cuda.memory_reserved() delta",
            pr,
            r1 - r0,
            tolerance=tol,
            note=(
                "segments: 2 MiB for requests up to 1 MiB, 20 MiB below 10 MiB, else the request rounded up to 2 MiB"
                + ("; expandable segments map 2 MiB pages, so up to 20 MiB either way" if expandable else "")
                + ("; a small request may fit an existing 2 MiB segment (0 B)" if small and not expandable else "")
            ),
        ),
    ]


def _rss_row(plan: AllocPlan, delta: int, pinned: bool) -> Row:
    thp = env.thp_mode()
    gran = 2 * MIB if thp == "always" else env.page_size()
    return Row(
        "resident memory delta (RssAnon)",
        plan.backing_bytes,
        delta,
        tolerance=2 * gran + NOISE,
        info=not pinned and plan.backing_bytes < 32 * MIB,
        note=(
            f"RssAnon of /proc/self/status before and after torch.zeros touched every page; pages of {gran:,} B (THP {thp}): the buffer's first and last pages may be shared with "
            f"allocator headers (2 pages), plus {NOISE // 1024} KiB for the interpreter's own allocations; "
            + ("glibc's mmap threshold was pinned at 128 KiB so the buffer is a fresh mapping"
               if pinned else "glibc's mmap threshold could not be pinned: a buffer under 32 MiB may reuse resident heap, "
               "so this row is shown for information only")
        ),
    )


def _rank_row(plan: AllocPlan, storage: int) -> Row:
    return Row(
        f"whole rank ({plan.rank_layers} layers), scaled",
        plan.rank_backing_bytes,
        storage * plan.rank_bytes_per_block // plan.bytes_per_block,
        info=True,
        note=f"measured x rank bytes_per_block {plan.rank_bytes_per_block:,} / probed {plan.bytes_per_block:,}",
    )


def _alloc_check(plan: AllocPlan, device: str, rows: list[Row], notes: list[str]) -> Check:
    engine = "vLLM 0.33 KV cache layout (allocate_kv_cache, LBNHC)"
    check = Check("alloc", f"Pool allocation on {device}", engine, rows)
    check.facts = AllocFacts(
        pp_rank=plan.pp_rank, pp=plan.pp, tp=plan.tp, layers_probed=len(plan.layers), rank_layers=plan.rank_layers,
        num_blocks=plan.num_blocks, block_size=plan.block_size, kv_dtype=plan.kv_dtype, grouping=plan.rule,
        bytes_per_block=plan.bytes_per_block, rank_bytes_per_block=plan.rank_bytes_per_block,
    )
    check.explanation = [
        "vLLM 0.33 allocates one int8 buffer of bytes_per_block x num_blocks (torch.zeros) and views it per layer "
        "as [blocks, kv heads, tokens, K+V bytes] in the cache dtype; KV cache groups overlay from byte 0",
        *notes,
    ]
    check.details = {
        "device": device,
        "num_blocks": plan.num_blocks,
        "block_size": plan.block_size,
        "bytes_per_block": plan.bytes_per_block,
        "rank_bytes_per_block": plan.rank_bytes_per_block,
        "predicted_rank_bytes": plan.rank_backing_bytes,
    }
    return check


def _alloc_conf() -> str:
    import os

    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + "," + os.environ.get("PYTORCH_ALLOC_CONF", "")


def _rows(torch: Any, buf: Any, plan: AllocPlan, views: list[tuple[LayerPlan, list[Any]]]) -> list[Row]:
    rows: list[Row] = []
    layers = []
    pred_sum = meas_sum = 0
    mismatch = []
    highest = 0
    for lp, tensors in views:
        s = lp.spec
        predicted = s.real_page_size_bytes * plan.num_blocks
        measured = sum(_tensor_bytes(t) for t in tensors)
        if isinstance(s, AttentionSpec):
            H, N, C = s.num_kv_heads, s.block_size, s.bytes_per_token // s.num_kv_heads
            want: list[tuple[int, ...]] = [(plan.num_blocks, H, N, C // tensors[0].element_size())]
        else:
            assert isinstance(s, MambaSpec)
            want = [(plan.num_blocks, *t.shape) for t in s.tensors]
        got = [tuple(t.shape) for t in tensors]
        if [tuple(w) for w in want] != got:
            mismatch.append(f"{lp.name}: {got} != {want}")
        pred_sum += predicted
        meas_sum += measured
        top = max(_highest_byte(t) for t in tensors)
        highest = max(highest, top)
        layers.append(
            {
                "layer": lp.layer,
                "kind": lp.kind,
                "group": lp.group,
                "offset": lp.offset,
                "shape": got if len(got) > 1 else list(got[0]),
                "dtype": str(tensors[0].dtype).removeprefix("torch."),
                "predicted_bytes": predicted,
                "measured_bytes": measured,
            }
        )
    rows.append(
        Row(
            f"layer views: sum of {len(views)} (numel x size)",
            pred_sum,
            meas_sum,
            mismatch="; ".join(mismatch)[:200],
            note="numel x element_size of each layer's view vs page_size_bytes x num_blocks from kvcalc's per-layer specs",
            details={"layers": layers},
        )
    )
    rows.append(
        Row(
            "highest byte a view addresses",
            plan.backing_bytes,
            highest,
            note="the layout needs exactly the buffer: no view runs past it and the largest group fills it",
        )
    )
    return rows
