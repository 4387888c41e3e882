"""The seed's special decodings as capacity: beam search, speculative tokens, automatic
prefix caching, and a CPU offload tier.

Everything is counted from the rank-local cache specs (``kvcalc.core.footprint.stage_specs``)
with the same two questions every spec answers (``held_blocks``, ``page_size_bytes``), so
sliding-window, chunked, MLA, cross-attention and state layers need no special case here.
Integers in bytes; no I/O.

Shared prefixes (beams and prefix caching) follow one rule. A sharer is a request (or a beam)
with ``tokens`` cached positions whose first ``shared_tokens`` positions are common to every
sharer. Only FULL blocks of that common prefix can be shared: ``shared_tokens // block_size``
of them, each stored once with a reference count equal to the number of sharers that still
hold it. Everything after it (the partial block included) belongs to each sharer alone.
Worked example, block 16, prompt 100, 4 beams of 119 positions: 100 // 16 = 6 shared blocks
(refcount 4); each beam holds cdiv(119, 16) = 8 blocks, 8 - 6 = 2 of them its own; the
group holds 6 + 4 x 2 = 14 blocks instead of 4 x 8 = 32.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvcalc.core.footprint import StageSpecs
from kvcalc.core.record import record, replace
from kvcalc.core.specs import CacheSpec, MambaSpec, cdiv
from kvcalc.errors import PlanError

# kinds whose blocks are indexed by position (block i holds positions i*bs .. i*bs+bs-1),
# so the leading blocks of a common prefix are the same blocks for every sharer
POSITIONAL = frozenset({"full", "mla", "sliding", "chunked"})

# vLLM's CPU offload rounds each offloaded chunk up to the host page size
# (``SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT = mmap.PAGESIZE``: 4096 B on x86-64 Linux)
HOST_PAGE_BYTES = 4096


def _groups(stage: StageSpecs) -> list[tuple[CacheSpec, int]]:
    """Identical specs of one stage counted together, in layer order: (spec, layers)."""
    return list(stage.grouped)


def _check_count(value: int, flag: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PlanError(f"{flag} must be an integer of at least {minimum}, got {value!r}")
    return value


# --------------------------------------------------------------------------- shared prefix


@record
class Sharer:
    """One request or beam: its cached positions and the common prefix it shares."""

    tokens: int
    shared_tokens: int

    def __post_init__(self) -> None:
        _check_count(self.tokens, "tokens")
        _check_count(self.shared_tokens, "shared tokens")


@record
class SharedGroup:
    """Blocks of one group of identical layers on one rank (counts are per layer)."""

    kind: str
    layers: int
    page_bytes: int  # one block of one layer on one rank
    shared_blocks: int  # distinct blocks of the common prefix that someone holds: stored once
    own_blocks: tuple[int, ...]  # each sharer's blocks of its own (partial block included)
    unshared_blocks: int  # what the sharers would hold with nothing shared
    refcounts: tuple[tuple[int, int], ...]  # (reference count, number of blocks), highest count first

    @property
    def blocks(self) -> int:
        return self.shared_blocks + sum(self.own_blocks)

    @property
    def bytes(self) -> int:
        return self.layers * self.page_bytes * self.blocks

    @property
    def unshared_bytes(self) -> int:
        return self.layers * self.page_bytes * self.unshared_blocks


def share_spec(spec: CacheSpec, sharers: Sequence[Sharer]) -> tuple[int, tuple[int, ...], int, tuple[tuple[int, int], ...]]:
    """(shared blocks, own blocks per sharer, blocks without sharing, refcount histogram) for one layer."""
    bs = spec.block_size
    held = [spec.held_blocks(s.tokens) for s in sharers]
    if spec.kind not in POSITIONAL:
        # per-request state (mamba) and encoder blocks (cross) are never shared here
        return 0, tuple(held), sum(held), ()
    events: dict[int, int] = {}
    own = []
    for s, h in zip(sharers, held, strict=True):
        end = cdiv(s.tokens, bs)
        first = end - h  # blocks before it were returned (sliding window, chunk)
        last = min(s.shared_tokens // bs, end)  # shared blocks are [0, last)
        n_shared = max(0, last - first)
        own.append(h - n_shared)
        if n_shared:
            events[first] = events.get(first, 0) + 1
            events[last] = events.get(last, 0) - 1
    histogram: dict[int, int] = {}
    count = 0
    prev = None
    for pos in sorted(events):
        if prev is not None and count:
            histogram[count] = histogram.get(count, 0) + pos - prev
        count += events[pos]
        prev = pos
    shared = sum(histogram.values())
    refcounts = tuple(sorted(histogram.items(), reverse=True))
    return shared, tuple(own), sum(held), refcounts


def share_stage(stage: StageSpecs, sharers: Sequence[Sharer]) -> tuple[SharedGroup, ...]:
    out = []
    for spec, n in _groups(stage):
        shared, own, unshared, refs = share_spec(spec, sharers)
        out.append(SharedGroup(spec.kind, n, spec.page_size_bytes, shared, own, unshared, refs))
    return tuple(out)


@record
class SharingReport:
    """A group of sharers on every stage; ``copies`` independent groups (e.g. --batch)."""

    stages: tuple[tuple[SharedGroup, ...], ...]  # one entry per PP stage
    tp: int
    copies: int = 1

    def _stage_bytes(self, attr: str) -> list[int]:
        return [sum(getattr(g, attr) for g in st) * self.copies for st in self.stages]

    @property
    def bytes_per_rank(self) -> int:
        """The largest rank: every TP rank of a stage holds the same."""
        return max(self._stage_bytes("bytes"), default=0)

    @property
    def unshared_bytes_per_rank(self) -> int:
        return max(self._stage_bytes("unshared_bytes"), default=0)

    @property
    def bytes_per_replica(self) -> int:
        return self.tp * sum(self._stage_bytes("bytes"))

    @property
    def unshared_bytes_per_replica(self) -> int:
        return self.tp * sum(self._stage_bytes("unshared_bytes"))

    @property
    def saved_bytes_per_rank(self) -> int:
        return self.unshared_bytes_per_rank - self.bytes_per_rank


def share_prefix(
    stages: Sequence[StageSpecs], sharers: Sequence[Sharer], *, tp: int = 1, copies: int = 1
) -> SharingReport:
    if not sharers:
        raise PlanError("a shared prefix needs at least one request")
    return SharingReport(tuple(share_stage(st, sharers) for st in stages), tp, copies)


def beams(stages: Sequence[StageSpecs], *, tp: int, prompt: int, tokens: int, width: int, copies: int = 1) -> SharingReport:
    """``width`` beams forked after a ``prompt``-token prefill, each holding ``tokens`` positions.

    The worst case for memory: beams that diverge right after the prompt. Full prompt blocks
    are shared (reference count = width); the partial prompt block and every later block are
    each beam's own (vLLM V0 copied the partial block on write; V1 runs every beam step as a
    request that reaches the prompt's full blocks through prefix caching)."""
    _check_count(width, "--beams", 1)
    _check_count(prompt, "--prompt")
    if tokens < prompt:
        raise PlanError(f"each beam holds at least the prompt's {prompt} positions, got {tokens}")
    return share_prefix(stages, [Sharer(tokens, prompt)] * width, tp=tp, copies=copies)


def prefix_hit_tokens(hit: int, prompt: int) -> int:
    """Positions a request can take from the prefix cache: at most prompt - 1, because vLLM
    always computes the last prompt token to get its logits (``get_computed_blocks``:
    ``max_cache_hit_length = request.num_tokens - 1``)."""
    return max(0, min(hit, prompt - 1))


def prefix_cache(
    stages: Sequence[StageSpecs], *, tp: int, hit: int, requests: Sequence[int], prompts: Sequence[int]
) -> SharingReport:
    """Requests that share a common prefix of ``hit`` tokens through automatic prefix caching.

    ``requests``: cached positions of each request; ``prompts``: each request's prompt length.
    Full blocks of the common prefix are stored once; the partial block is per request."""
    _check_count(hit, "--prefix-cache")
    if len(requests) != len(prompts):
        raise PlanError("one prompt length per request is needed")  # pragma: no cover - caller's bug
    shortest = min(prompts, default=0)
    if hit > shortest:
        raise PlanError(
            f"--prefix-cache {hit} is longer than the shortest prompt ({shortest} tokens); "
            "the common prefix is part of every prompt: give at most that"
        )
    sharers = [Sharer(t, prefix_hit_tokens(hit, p)) for t, p in zip(requests, prompts, strict=True)]
    # the request that wrote the prefix holds its full blocks whatever its cap
    if sharers:
        sharers[0] = Sharer(requests[0], hit)
    return share_prefix(stages, sharers, tp=tp)


# --------------------------------------------------------------------- speculative tokens


@record
class SpecGroup:
    kind: str
    layers: int
    page_bytes: int
    decode_blocks: int  # sum over requests, a plain decode step (slots for T + 1 positions)
    verify_blocks: int  # sum over requests, a verification step (T + 1 + K + lookahead)
    worst_extra_blocks: int  # per request, the most the verification step can add

    @property
    def extra_blocks(self) -> int:
        return self.verify_blocks - self.decode_blocks

    @property
    def extra_bytes(self) -> int:
        return self.layers * self.page_bytes * self.extra_blocks

    @property
    def worst_extra_bytes_per_request(self) -> int:
        return self.layers * self.page_bytes * self.worst_extra_blocks

    @property
    def decode_bytes(self) -> int:
        return self.layers * self.page_bytes * self.decode_blocks

    @property
    def verify_bytes(self) -> int:
        return self.layers * self.page_bytes * self.verify_blocks


@record
class SpecReport:
    stages: tuple[tuple[SpecGroup, ...], ...]
    tp: int
    spec_tokens: int
    lookahead: int
    requests: int

    @property
    def extra_slots_per_request(self) -> int:
        return self.spec_tokens + self.lookahead

    def _per_stage(self, attr: str) -> list[int]:
        return [sum(getattr(g, attr) for g in st) for st in self.stages]

    def per_rank(self, attr: str) -> int:
        return max(self._per_stage(attr), default=0)

    def per_replica(self, attr: str) -> int:
        return self.tp * sum(self._per_stage(attr))


def speculative(
    stages: Sequence[StageSpecs],
    *,
    tp: int,
    requests: Sequence[int],
    spec_tokens: int,
    lookahead: int = 0,
    max_model_len: int | None = None,
) -> SpecReport:
    """Blocks a verification step needs beyond a plain decode step.

    A request holding T positions decodes by writing its newest token at position T (slots
    for T + 1). Verifying K draft tokens writes them too (T + 1 + K), and a drafter that keeps
    its own KV (EAGLE, a draft model) writes ``lookahead`` more (vLLM ``num_lookahead_tokens``),
    capped at max_model_len (``allocate_slots``). Rejected drafts roll back
    ``num_computed_tokens``: their slots are overwritten by the next tokens, and blocks already
    given stay with the request until it ends. State layers (mamba) keep K speculative state
    blocks for the request's whole life (``num_speculative_blocks``)."""
    _check_count(spec_tokens, "--spec-tokens", 1)
    _check_count(lookahead, "--spec-lookahead")
    extra = spec_tokens + lookahead
    out = []
    for st in stages:
        groups = []
        for spec, n in _groups(st):
            if isinstance(spec, MambaSpec):
                with_spec = replace(spec, num_speculative_blocks=spec.num_speculative_blocks + spec_tokens)
                base = sum(spec.held_blocks(t + 1) for t in requests)
                ver = sum(with_spec.held_blocks(t + 1) for t in requests)
                worst = spec_tokens
            else:
                cap = max_model_len if max_model_len is not None else max(requests, default=0) + 1 + extra
                base = sum(spec.held_blocks(min(t + 1, cap)) for t in requests)
                ver = sum(spec.held_blocks(min(t + 1 + extra, cap)) for t in requests)
                # cdiv(a + x, bs) - cdiv(a, bs) is at most cdiv(x, bs), reached when a is a
                # multiple of bs; cross-attention holds the encoder whatever the length
                worst = 0 if spec.kind == "cross" else cdiv(extra, spec.block_size)
            groups.append(SpecGroup(spec.kind, n, spec.page_size_bytes, base, ver, worst))
        out.append(tuple(groups))
    return SpecReport(tuple(out), tp, spec_tokens, lookahead, len(requests))


# ----------------------------------------------------------------------------- CPU offload


@record
class OffloadReport:
    cpu_bytes: int  # the tier for one replica (vLLM: summed over its ranks)
    ranks: int  # ranks of one replica sharing it
    block_size: int
    bytes_per_token_per_rank: int  # the largest stage
    block_bytes_per_rank: int
    chunk_bytes: int  # one block on every rank, rounded up to the host page
    blocks: int
    gpu_pool_tokens: int | None = None

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size

    @property
    def cpu_bytes_per_rank(self) -> int:
        return self.cpu_bytes // self.ranks


def offload(
    stages: Sequence[StageSpecs], *, tp: int, cpu_bytes: int, block_size: int, gpu_pool_tokens: int | None = None
) -> OffloadReport:
    """Tokens a CPU tier of ``cpu_bytes`` holds (vLLM's native offloading, ``--kv-offloading-size``).

    The size is the total over the ranks of one replica; each offloaded chunk is one block of
    every rank's layers, rounded up to the host page: chunks = cpu_bytes // round_up(block
    bytes per rank x ranks, 4096) (``CPUOffloadingSpec``). Tokens = chunks x block size. Every
    token carries all the attention layers of its rank; recurrent state is not offloaded."""
    _check_count(cpu_bytes, "--offload")
    _check_count(block_size, "--block-size", 1)
    ranks = tp * len(stages)
    bpt = max((st.bytes_per_token for st in stages), default=0)
    if bpt == 0:
        raise PlanError("--offload: the model keeps no per-token KV (attention-free), nothing to offload")
    block_bytes = bpt * block_size
    chunk = cdiv(block_bytes * ranks, HOST_PAGE_BYTES) * HOST_PAGE_BYTES
    return OffloadReport(cpu_bytes, ranks, block_size, bpt, block_bytes, chunk, cpu_bytes // chunk, gpu_pool_tokens)
