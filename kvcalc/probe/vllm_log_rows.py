"""The receipt of a vLLM log check: one row per logged figure, kvcalc's range beside it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvcalc.app.probe_report import Row
from kvcalc.core import vllm_rules as R
from kvcalc.core.vllm_texts import no_memory_error
from kvcalc.probe.vllm_log_parse import VllmLog

if TYPE_CHECKING:
    from kvcalc.core.pool import PoolReport, WorkerPlan

GIB = 1 << 30
FITS = "fits max_model_len (1 yes, 0 no)"


def _gib2(n: int) -> float:
    return round(n / GIB, 2)


def _range(values: Sequence[int | float]) -> tuple[int | float, int | float]:
    return min(values), max(values)


def log_rows(
    log: VllmLog, rules: R.RuleLine, L: int, printed: str, pools: Sequence[PoolReport | None], from_error: bool,
    other_memories: Sequence[tuple[str, PoolReport, PoolReport]] = (),
) -> list[Row]:
    """``other_memories``: (printed GiB, pool at its low end, at its high end) for each other
    worker memory the log shows; before 0.11.1 a worker's pair reflects its own memory."""
    p_lo, p_mid, p_hi = pools
    rows = [
        Row("available KV cache memory (GiB, the input)", float(printed), float(printed), unit="GiB", info=True,
            note="from the refusal's memory figure" if from_error else "the smallest 'Available KV cache memory' line")
    ]
    if p_lo is None or p_mid is None or p_hi is None:  # nothing left for the cache: vLLM refuses in every release
        rows.append(Row(FITS, 0, 0 if (log.does_not_fit or log.failed) else None, unit="",
                        note=f"available <= 0: vLLM raises '{no_memory_error(rules)}'"))
        return rows
    if log.gpu_blocks is not None:
        rows.append(Row("GPU blocks (# GPU blocks)", p_mid.num_blocks, log.gpu_blocks, unit="blocks",
                        predicted_min=p_lo.num_blocks, predicted_max=p_hi.num_blocks,
                        note=f"available // bytes_per_block ({p_mid.bytes_per_block:,} B), null block included"))
    rows.extend(_pair_rows(log, rules, L, p_lo, p_mid, p_hi, other_memories))
    rows.extend(_fit_rows(log, rules, p_lo, p_mid, p_hi))
    return rows


def _pair_rows(
    log: VllmLog, rules: R.RuleLine, L: int, p_lo: PoolReport, p_mid: PoolReport, p_hi: PoolReport,
    other_memories: Sequence[tuple[str, PoolReport, PoolReport]],
) -> list[Row]:
    """Each logged size/concurrency pair. Before 0.11.1 each worker logs its own pair before the
    minimum over workers: a pair is then compared with the range over the workers' own figures,
    at each worker memory the log shows (the log does not say which worker printed which pair)."""
    per_worker = rules.log == R.LOG_PER_WORKER and len(log.pairs) > 1

    def figures(p: PoolReport) -> tuple[list[int], list[float]]:
        if per_worker:
            ws: Sequence[WorkerPlan] = p.workers
            return [w.kv_cache_size_tokens for w in ws], [w.max_concurrency for w in ws]
        return [p.kv_cache_size_tokens], [p.max_concurrency]

    ends = [("", p_lo, p_hi), *(other_memories if per_worker else ())]
    ranges = []  # (memory, tokens range, concurrency range printed)
    for gib, lo, hi in ends:
        (t_lo, c_lo), (t_hi, c_hi) = figures(lo), figures(hi)
        ranges.append((gib, (min(t_lo), max(t_hi)), (float(f"{min(c_lo):.2f}"), float(f"{max(c_hi):.2f}"))))
    rows: list[Row] = []
    where = "each worker's own figure (logged before the minimum)" if per_worker else "the pool's figure"
    for i, pair in enumerate(log.pairs):
        tag = f" (line {i + 1} of {len(log.pairs)})" if len(log.pairs) > 1 else ""
        if pair.tokens is not None:
            gib, t, _ = _pick(ranges, pair.tokens, 1)
            rows.append(Row("GPU KV cache size" + tag, p_mid.kv_cache_size_tokens, pair.tokens, unit="tokens",
                            predicted_min=t[0], predicted_max=t[1],
                            note=f"{rules.tokens} ({rules.label}); {where}" + (f", at the {gib} GiB worker" if gib else "")))
        if pair.concurrency is not None and pair.max_model_len == L:
            gib, _, c = _pick(ranges, pair.concurrency, 2)
            rows.append(Row(f"Maximum concurrency for {L:,} tokens" + tag, round(p_mid.max_concurrency, 4), pair.concurrency,
                            unit="x", predicted_min=c[0], predicted_max=c[1],
                            note=f"{rules.concurrency}: {p_mid.num_blocks} blocks, {p_mid.blocks_per_request} per request; "
                                 "printed with 2 decimals" + (f", at the {gib} GiB worker" if gib else "")))
    return rows


def _pick(ranges: list, measured: float, k: int) -> tuple:
    """The first worker memory whose range (element k) holds the figure, else the smallest memory's."""
    return next((r for r in ranges if r[k][0] <= measured <= r[k][1]), ranges[0])


def _failing(p: PoolReport) -> WorkerPlan:
    """The worker whose check fails first (vLLM's message is that worker's), else the tightest."""
    for w in p.workers:
        if w.check_bytes <= 0 or w.needed_bytes > w.check_bytes:
            return w
    return min(p.workers, key=lambda w: w.check_bytes - w.needed_bytes)


def _fit_rows(log: VllmLog, rules: R.RuleLine, p_lo: PoolReport, p_mid: PoolReport, p_hi: PoolReport) -> list[Row]:
    rows: list[Row] = []
    started = bool(log.pairs) or log.gpu_blocks is not None
    if log.does_not_fit or started:
        lo_hi = (int(p_lo.fits), int(p_hi.fits))
        why = "the log shows vLLM's refusal" if log.does_not_fit else "the log shows the pool's figures: the check passed"
        rows.append(Row(FITS, int(p_mid.fits), 0 if log.does_not_fit else 1, unit="", predicted_min=min(lo_hi),
                        predicted_max=max(lo_hi), note=f"{rules.fit_check} ({rules.label}); {why}"))
    w_lo, w_mid, w_hi = _failing(p_lo), _failing(p_mid), _failing(p_hi)
    unit = log.fit_unit or "GiB"
    if log.needed_gib is not None:
        needed = _range([_gib2(w.needed_bytes) for w in (w_lo, w_hi)])
        rows.append(Row(f"KV cache needed for one request ({unit})", _gib2(w_mid.needed_bytes), float(log.needed_gib),
                        unit=unit, predicted_min=needed[0], predicted_max=needed[1],
                        note=f"the fit check's need: {rules.fit_check}" + ("; 'GB' is bytes / 2**30" if unit == "GB" else "")))
    if log.error_memory_gib is not None:
        mem = _range([_gib2(w.check_bytes) for w in (w_lo, w_hi)])
        rows.append(Row(f"available KV cache memory in the refusal ({unit})", _gib2(w_mid.check_bytes),
                        float(log.error_memory_gib), unit=unit, predicted_min=mem[0], predicted_max=mem[1],
                        note="the memory the check compares: " + _check_memory(rules)))
    if log.estimated_max_model_len is not None:
        est = _range([p.estimated_max_model_len or 0 for p in (p_lo, p_hi)])
        rows.append(Row("estimated maximum model length", p_mid.estimated_max_model_len or 0, log.estimated_max_model_len,
                        unit="tokens", predicted_min=est[0], predicted_max=est[1],
                        note="binary search over [1, max_model_len] with the fit check's need"))
    return rows


def _check_memory(rules: R.RuleLine) -> str:
    if rules.fit_check in (R.FIT_MIN_ALL, R.FIT_WHOLE_MODEL):
        return "the smallest worker's available memory"
    if rules.fit_check == R.FIT_NULL_BLOCK:
        return "available less one block (the null block)"
    return "the worker's available memory"
