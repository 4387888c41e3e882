"""What the KV cache saves, in counts (docs/design.md, section 1). Pure integers, no I/O.

A request has a prompt of P tokens and generates G tokens y_1..y_G. Prefill of the P
prompt positions yields y_1; each later step feeds one token back to get the next, and
y_G is never fed back (its output would be an unwanted y_{G+1}).

- Without a cache every step re-runs the whole prefix: P, P+1, ..., P+G-1 positions,
  ``G*P + G*(G-1)/2`` in all. Example P=4, G=5: 4+5+6+7+8 = 30.
- With a cache each position is processed once: ``P + G - 1``. Example: 4 + 5 - 1 = 8.
- Dense attention scores (a teaching estimate of scale, not FLOPs: causal kernels need not
  form the full square): without a cache each step scores its whole square,
  ``sum_{g=0}^{G-1} (P+g)^2`` (16+25+36+49+64 = 190); with a cache one P x P prefill plus
  one new query per step reading its history of P+g positions, ``P^2 + sum_{g=1}^{G-1} (P+g)``
  (16 + 5+6+7+8 = 42).
- Continuation (the service keeps the state for a follow-up turn): y_G is fed back once
  more to write its K/V, so the cached path processes and holds ``P + G`` positions and
  scores one more query of P+G. The uncached path has nothing to keep: unchanged.
"""

from __future__ import annotations

from kvcalc.core.record import record
from kvcalc.errors import KvcalcError, named


def _sum_squares(n: int) -> int:
    """0^2 + 1^2 + ... + n^2 (0 for n < 1)."""
    return n * (n + 1) * (2 * n + 1) // 6 if n > 0 else 0


@record
class RecomputeCounts:
    prompt: int  # P
    gen: int  # G
    continuation: bool
    positions_no_cache: int  # G*P + G*(G-1)/2
    positions_cache: int  # P + G - 1 (P + G with continuation)
    scores_no_cache: int  # sum_{g=0}^{G-1} (P+g)^2
    scores_cache: int  # P^2 + sum_{g=1}^{G-1} (P+g)  (+ (P+G) with continuation)

    @property
    def positions_saved(self) -> int:
        """Positions not re-run; each is one pass through every decoder layer's norms,
        Q/K/V and output projections and MLP (attention over the history is apart)."""
        return self.positions_no_cache - self.positions_cache

    @property
    def scores_saved(self) -> int:
        return self.scores_no_cache - self.scores_cache

    @property
    def positions_ratio(self) -> float:
        return self.positions_no_cache / self.positions_cache

    @property
    def scores_ratio(self) -> float:
        return self.scores_no_cache / self.scores_cache

    @property
    def cached_positions(self) -> int:
        """Positions whose K/V the cache holds at the end of the request."""
        return self.positions_cache


def recompute_counts(prompt: int, gen: int, *, continuation: bool = False) -> RecomputeCounts:
    """Counts for a prompt of ``prompt`` tokens generating ``gen`` tokens."""
    if isinstance(prompt, bool) or not isinstance(prompt, int) or prompt < 1:
        raise KvcalcError(f"{named('prompt')} must be a positive integer (prompt tokens), got {prompt!r}")
    if isinstance(gen, bool) or not isinstance(gen, int) or gen < 1:
        raise KvcalcError(f"{named('gen')} must be a positive integer (generated tokens, at least 1), got {gen!r}")
    p, g = prompt, gen
    positions_no_cache = g * p + g * (g - 1) // 2
    # squares of P .. P+G-1
    scores_no_cache = _sum_squares(p + g - 1) - _sum_squares(p - 1)
    # P^2 prefill, then queries reading P+1 .. P+G-1 positions
    decode_reads = (g - 1) * p + g * (g - 1) // 2
    positions_cache = p + g - 1
    scores_cache = p * p + decode_reads
    if continuation:
        positions_cache += 1
        scores_cache += p + g
    return RecomputeCounts(p, g, continuation, positions_no_cache, positions_cache, scores_no_cache, scores_cache)
