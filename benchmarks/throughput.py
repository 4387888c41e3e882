"""Throughput of the core: (model, plan, traffic) combinations evaluated per second on one core.

Goal (issue 9): >= 100,000 combinations per second. Run: python3 benchmarks/throughput.py

One combination = one model (every bundled preset), one parallel plan (TP x PP, with and
without an explicit PP partition), one cache setting (KV dtype x block size) and one traffic
(equal requests x batch, or a mixed list of lengths); one evaluation gives the bytes per
token, the effective bytes and the block-rounded bytes of the largest rank
(``kvcalc.core.fast.fast_footprint``). Plans a model cannot take (TP not dividing its heads)
are dropped while the list is built, before timing. Models are summarised once, before
timing (``summarize``): that is the per-model precomputation the fast path is built on.

Printed, all measured in this one run: combinations per second of the fast path and its
ratio to the 100k goal, the same for ``footprint()`` on a sample, and the speed-up. The
sample is also checked for equal results (tests/test_fast.py does that properly).
"""

from __future__ import annotations

import gc
import random
import sys
import time

GOAL = 100_000


def build_combos():  # noqa: ANN201
    from kvcalc.core.fast import summarize, traffic_pairs
    from kvcalc.core.footprint import CacheSettings, resolve_kv_dtype
    from kvcalc.core.plan import ParallelPlan
    from kvcalc.errors import PlanError
    from kvcalc.sources.config import spec_from_config
    from kvcalc.sources.presets import all_presets

    rng = random.Random(9)
    traffics = [((t, b),) for t in (1, 512, 4096, 32768, 131072) for b in (1, 8, 256)]
    traffics += [traffic_pairs(rng.randrange(0, 65536) for _ in range(12)) for _ in range(3)]
    combos = []
    for name, preset in sorted(all_presets(include_user=False).items()):
        model = spec_from_config(preset.load()["config"], name=name, source="")
        summary = summarize(model)
        caches = [
            CacheSettings(kv_dtype=resolve_kv_dtype(kv, model), block_size=bs)
            for kv in ("auto", "fp8", "fp8_per_token_head")
            for bs in (16, 32)
        ]
        plans = [ParallelPlan(tp=tp, pp=pp) for tp in (1, 2, 4, 8, 16) for pp in (1, 2, 4)]
        n = model.num_layers
        plans.append(ParallelPlan(tp=1, pp=2, pp_layers=(n // 3, n - n // 3)))
        for plan in plans:
            try:
                summary.heads_per_rank(plan.tp)
                summary.ranges(plan.pp, plan.pp_layers)
                summary.state_elements(plan.tp)
            except PlanError:
                continue
            for cache in caches:
                for traffic in traffics:
                    combos.append((model, summary, plan, cache, traffic))
    rng.shuffle(combos)
    return combos


def time_fast(combos, repeat: int) -> float:  # noqa: ANN001
    from kvcalc.core.fast import fast_footprint

    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        for _model, summary, plan, cache, traffic in combos:
            fast_footprint(summary, plan, cache, traffic)
        best = min(best, time.perf_counter() - t0)
    return best


def time_reference(sample) -> tuple[float, list]:  # noqa: ANN001
    from kvcalc.core.footprint import Traffic, footprint

    traffics = [Traffic(tuple(t for t, n in traffic for _ in range(n))) for _m, _s, _p, _c, traffic in sample]
    gc.collect()
    t0 = time.perf_counter()
    out = [footprint(m, p, c, tr) for (m, _s, p, c, _t), tr in zip(sample, traffics)]
    return time.perf_counter() - t0, out


def main() -> None:
    from kvcalc.core.fast import fast_footprint

    combos = build_combos()
    models = len({id(c[0]) for c in combos})
    dt = time_fast(combos, repeat=5)
    rate = len(combos) / dt
    sample = combos[:2000]
    ref_dt, refs = time_reference(sample)
    ref_rate = len(sample) / ref_dt
    for (m, s, p, c, t), fp in zip(sample, refs):
        got = fast_footprint(s, p, c, t)
        want = (fp.bytes_per_token_per_rank, fp.effective_bytes_per_rank, fp.block_rounded_bytes_per_rank)
        if got != want:
            sys.exit(f"MISMATCH {m.name} {p} {c.kv_dtype.name} {c.block_size} {t}: fast {got} != footprint {want}")
    print(f"python {sys.version.split()[0]}, one core; {len(combos):,} combinations over {models} presets")
    print(f"fast path (kvcalc.core.fast): {rate:,.0f} combinations/s (best of 5) = {rate / GOAL:.2f}x the 100,000/s goal")
    print(f"footprint() (full objects):   {ref_rate:,.0f} combinations/s on {len(sample):,} of them = {ref_rate / GOAL:.3f}x the goal")
    print(f"speed-up of the fast path: {rate / ref_rate:.1f}x; results equal on all {len(sample):,} compared")


if __name__ == "__main__":
    main()
