"""A fast path for the request-side measures of ``kvcalc.core.footprint.footprint()``.

``footprint()`` builds a spec object per layer per stage and a record per rank: right for
one answer with every detail, slow for sweeps over many (model, plan, traffic)
combinations. Here a model is summarised once (``summarize``): its cache modules are
collapsed into classes (kind, window, KV heads, head sizes) with, for each class, a prefix
sum of module counts over the decoder layers, so the modules a PP stage holds are
``prefix[end] - prefix[start]``. One evaluation (``fast_footprint``) is then integer
arithmetic over the few classes and the stages, with no per-layer objects.

The results equal ``footprint()``'s (``tests/test_fast.py`` checks it on random models,
plans and traffic); the errors for a plan the model cannot take are the same PlanErrors,
raised by the same functions the first time a TP or PP size is seen. Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from kvcalc.core.footprint import CacheSettings, check_tp
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan, kv_heads_per_rank, pp_ranges
from kvcalc.errors import PlanError

# class kinds, as small integers for the inner loop
FULL, SLIDING, CHUNKED, CROSS, MLA, MAMBA = range(6)
_KIND = {"full": FULL, "sliding": SLIDING, "chunked": CHUNKED, "cross": CROSS, "mla": MLA, "mamba": MAMBA}


class ModelSummary:
    """What ``fast_footprint`` needs from a model, computed once.

    ``classes``: one tuple per distinct cache module, ``(kind, window, kv_heads, k + v
    elements per head, prefix)`` where ``prefix[i]`` counts the modules of the class in
    decoder layers ``< i``. Mamba classes keep their state tensors instead of heads.
    Per-TP and per-PP facts (heads per rank, stage ranges) are memoised the first time
    a size is seen, after the same checks ``footprint()`` makes.
    """

    __slots__ = ("model", "num_layers", "classes", "states", "_tp", "_pp", "_state")

    def __init__(self, model: ModelSpec) -> None:
        self.model = model
        self.num_layers = model.num_layers
        keys: list[tuple] = []
        layers_of: dict[tuple, list[int]] = {}
        states: dict[tuple, tuple] = {}
        for layer in model.layers:
            if layer.kind not in _KIND:
                raise PlanError(f"layer kind {layer.kind!r} has no cache spec")
            kind = _KIND[layer.kind]
            if kind == MAMBA:
                key: tuple = (kind, 0, 0, 0, layer.state)
                states[key] = layer.state
            elif kind == MLA:
                key = (kind, 0, 1, layer.head_size, ())
            else:
                key = (kind, layer.window, layer.num_kv_heads, layer.head_size + layer.head_size_v, ())
            if key not in layers_of:
                keys.append(key)
                layers_of[key] = []
            layers_of[key].append(layer.layer)
        n = max(self.num_layers, max((x.layer + 1 for x in model.layers), default=0))
        classes = []
        for key in keys:
            per_layer = Counter(layers_of[key])
            prefix = [0] * (n + 1)
            run = 0
            for i in range(n):
                run += per_layer.get(i, 0)
                prefix[i + 1] = run
            classes.append((key[0], key[1], key[2], key[3], tuple(prefix)))
        self.classes: tuple[tuple[int, int, int, int, tuple[int, ...]], ...] = tuple(classes)
        # mamba classes: their StateArch tuples, in class order (None for attention)
        self.states: tuple = tuple(states.get(k) for k in keys)
        self._tp: dict[int, tuple[int, ...]] = {}
        self._pp: dict[tuple[int, tuple[int, ...] | None], tuple[tuple[int, int], ...]] = {}
        self._state: dict[int, tuple[tuple[int, int], ...]] = {}

    def heads_per_rank(self, tp: int) -> tuple[int, ...]:
        """Per class: KV heads one TP rank holds (attention), or -1 for a mamba class.
        Raises the PlanErrors ``footprint()`` raises for this TP size."""
        hit = self._tp.get(tp)
        if hit is not None:
            return hit
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise PlanError(f"--tp must be a positive integer, got {tp!r}")
        check_tp(self.model, tp)
        out = []
        for kind, _w, heads, _e, _p in self.classes:
            if kind == MAMBA:
                out.append(-1)
            elif kind == MLA:
                out.append(1)
            else:
                out.append(kv_heads_per_rank(heads, tp)[0])
        self._tp[tp] = res = tuple(out)
        return res

    def state_elements(self, tp: int) -> tuple[tuple[int, int], ...]:
        """Per class: (conv elements, ssm elements) one TP rank holds; (0, 0) for attention."""
        hit = self._state.get(tp)
        if hit is not None:
            return hit
        out = []
        for st in self.states:
            conv = ssm = 0
            for t in st or ():
                shape = list(t.shape)
                if t.split_dim >= 0:
                    if shape[t.split_dim] % tp:
                        raise PlanError(
                            f"--tp {tp} does not divide a state dimension of {shape[t.split_dim]}; valid: a divisor of it"
                        )
                    shape[t.split_dim] //= tp
                n = 1
                for d in shape:
                    n *= d
                if t.role == "conv":
                    conv += n
                else:
                    ssm += n
            out.append((conv, ssm))
        self._state[tp] = res = tuple(out)
        return res

    def ranges(self, pp: int, partition: tuple[int, ...] | None) -> tuple[tuple[int, int], ...]:
        key = (pp, partition)
        hit = self._pp.get(key)
        if hit is None:
            hit = self._pp[key] = tuple(pp_ranges(self.num_layers, pp, partition))
        return hit


def summarize(model: ModelSpec) -> ModelSummary:
    return ModelSummary(model)


def traffic_pairs(requests: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Requests as (cached positions, how many requests) pairs: 1000 equal requests are one pair."""
    out: dict[int, int] = {}
    for t in requests:
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise PlanError(f"token counts must be non-negative integers, got {t!r}")
        out[t] = out.get(t, 0) + 1
    return tuple(out.items())


def fast_footprint(
    s: ModelSummary, plan: ParallelPlan, cache: CacheSettings, traffic: tuple[tuple[int, int], ...]
) -> tuple[int, int, int]:
    """(bytes per token per rank, effective bytes per rank, block-rounded bytes per rank),
    each the largest over the ranks, exactly as ``footprint()``'s
    ``bytes_per_token_per_rank``, ``effective_bytes_per_rank`` and
    ``block_rounded_bytes_per_rank``. ``traffic``: (positions, count) pairs (``traffic_pairs``).
    """
    tp = plan.tp
    heads = s._tp.get(tp) or s.heads_per_rank(tp)
    ranges = s._pp.get((plan.pp, plan.pp_layers)) or s.ranges(plan.pp, plan.pp_layers)
    dt = cache.kv_dtype
    db = dt.bytes
    scale = dt.scale_bytes_per_head
    mla_tok = dt.mla_token_bytes
    bs = cache.block_size
    states = None
    # the traffic's totals every full-attention class shares: positions, blocks, live requests
    tokens = blocks_all = live = 0
    for t, n in traffic:
        if t:
            tokens += t * n
            blocks_all += -(-t // bs) * n
            live += n
    # per class: bytes per token on one rank, effective and block-rounded bytes of the
    # whole traffic in ONE module of the class
    per = []
    for i, (kind, w, _h, elems, prefix) in enumerate(s.classes):
        if kind == FULL:
            bpt = heads[i] * (elems * db + scale)
            per.append((prefix, bpt, bpt * tokens, bpt * blocks_all * bs))
            continue
        if kind == MLA:
            bpt = mla_tok or elems * db
            per.append((prefix, bpt, bpt * tokens, bpt * blocks_all * bs))
            continue
        if kind == MAMBA:
            if states is None:
                states = s._state.get(tp) or s.state_elements(tp)
            conv, ssm = states[i]
            state = (conv * cache.mamba_dtype_bytes + ssm * cache.mamba_ssm_dtype_bytes) * (
                1 + cache.num_speculative_blocks
            )
            per.append((prefix, 0, state * live, state * live))
            continue
        bpt = heads[i] * (elems * db + scale)
        eff = blocks = 0
        if kind == SLIDING:
            for t, n in traffic:
                past = t - w
                if past > 0:
                    eff += w * n
                    blocks += (-(-t // bs) - past // bs) * n
                else:
                    eff += t * n
                    blocks += -(-t // bs) * n
        elif kind == CHUNKED:
            for t, n in traffic:
                if t:
                    start = ((t - 1) // w) * w
                    eff += (t - start) * n
                    blocks += (-(-t // bs) - start // bs) * n
        else:  # CROSS: the encoder's positions for every live request; no bytes per decoder token
            per.append((prefix, 0, bpt * w * live, bpt * -(-w // bs) * bs * live))
            continue
        per.append((prefix, bpt, bpt * eff, bpt * blocks * bs))
    best_bpt = best_eff = best_rnd = 0
    for start, end in ranges:
        b = e = r = 0
        for prefix, bpt, eff, rnd in per:
            c = prefix[end] - prefix[start]
            if c:
                b += c * bpt
                e += c * eff
                r += c * rnd
        if b > best_bpt:
            best_bpt = b
        if e > best_eff:
            best_eff = e
        if r > best_rnd:
            best_rnd = r
    return best_bpt, best_eff, best_rnd
