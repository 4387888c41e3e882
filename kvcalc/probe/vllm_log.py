"""Check 4: the figures a vLLM start-up log reports, against kvcalc's pool for the same memory,
under the rules of the log's own release (``--vllm-version``, else the log's banner).

The log is read by ``kvcalc.probe.vllm_log_parse`` (run by run). vLLM prints the memory
rounded to 0.01 GiB (``round(bytes / 2**30, 2)`` or ``%.2f``), so the memory it had is only
known to within +-0.005 GiB (about 5.4 MB). kvcalc computes its pool at both ends of that
range, and a logged figure agrees when it lies inside what the two ends give (the
concurrency and GiB figures rounded to 2 decimals as printed). The receipt holds one row per
logged figure: the memory (the input), num_gpu_blocks, each worker's size/concurrency pair
(paired with that worker's memory before 0.11.1), the fit verdict, and the refusal's needed
GiB, memory and estimated maximum length.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.app.probe_report import Check, LogFacts
from kvcalc.app.settings import DEFAULT_VLLM_VERSION
from kvcalc.core import vllm_rules as R
from kvcalc.errors import KvcalcError
from kvcalc.probe.vllm_log_parse import VllmLog, parse_log, parse_runs

if TYPE_CHECKING:
    from kvcalc.core.pool import PoolReport

__all__ = ["memory_range", "parse_log", "probe_log", "read_runs", "rules_version"]

GIB = 1 << 30
HALF = Decimal("0.005")


MAX_LOG_BYTES = 32 << 20  # a start-up log is a few hundred KiB; the capacity lines come in its first minutes


def read_runs(path: str, memory_given: bool = False) -> list[VllmLog]:
    """The runs of a log file that report something to compare; one-line errors otherwise."""
    from kvcalc.sources.files import read_limited

    try:
        p = Path(path).expanduser()
        if not p.exists():
            raise KvcalcError(f"--from-vllm-log: no file {path!r}")
        if p.is_dir():
            raise KvcalcError(f"--from-vllm-log: {path!r} is a folder; give the log file")
        # bounded: a regular file is sized first, /dev/zero stops at the limit, an idle FIFO after a wait
        text = read_limited(p, MAX_LOG_BYTES, "--from-vllm-log").decode("utf-8", errors="replace")
    except KvcalcError as exc:
        raise KvcalcError(f"{exc.message}; give the engine's start-up log (the first few thousand lines)") from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: ~unknownuser
        raise KvcalcError(f"--from-vllm-log: cannot read {path!r}: {getattr(exc, 'strerror', None) or exc}") from None
    if "\x00" in text[:4096]:
        raise KvcalcError(f"--from-vllm-log {path}: a binary file, not a vLLM start-up log")
    runs = [r for r in parse_runs(text) if r.has_figures]
    if not runs:
        raise KvcalcError(
            f"--from-vllm-log {path}: no 'Available KV cache memory: X GiB', 'GPU KV cache size', 'Maximum concurrency "
            "for', 'num_gpu_blocks' nor start-up refusal line found; paste the engine's start-up log"
        )
    for run in runs:
        if not run.available_gib and run.error_memory_gib is None and not memory_given:
            raise KvcalcError(
                f"--from-vllm-log {path}: a run reports {_what(run)} but no 'Available KV cache memory: X GiB' (V1) nor "
                "'kv_cache_size=XGiB' (V0) line (releases before 0.9.1 print none): kvcalc needs the memory the engine had; "
                "paste the whole start-up log or give --kv-cache-memory"
            )
    return runs


def _what(run: VllmLog) -> str:
    if run.pairs:
        return "'GPU KV cache size' / 'Maximum concurrency'"
    return "'num_gpu_blocks'" if run.gpu_blocks is not None else "figures"


def memory_range(gib_text: str) -> tuple[int, int, int]:
    """(low, printed, high) bytes that print as ``gib_text`` GiB with 2 decimals.
    Example: "2.89" -> [2.885, 2.895] GiB = [3,097,745,162, 3,108,482,580] B."""
    try:
        v = Decimal(gib_text)
    except InvalidOperation:  # pragma: no cover - the regex only passes numbers
        raise KvcalcError(f"--from-vllm-log: {gib_text!r} is not a number") from None
    lo = math.ceil((v - HALF) * GIB)
    hi = math.floor((v + HALF) * GIB)
    return max(lo, 0), max(int(v * GIB), 0), max(hi, 0)


def rules_version(log: VllmLog, given: str | None) -> tuple[str, str]:
    """The release whose rules apply, and why."""
    if given is not None:
        return given, f"--vllm-version {given}"
    if log.version:
        try:
            _, why = R.rules_for(log.version)
        except KvcalcError:
            return "0.20", (f"the log's vLLM {log.version} predates the V1 engine, whose rules kvcalc has; V0 sized the "
                            "pool the same way (available // bytes per block): the 0.20 line's rules")
        return log.version, f"the log's banner: {why}"
    from kvcalc.probe.vllm_log_parse import FINGERPRINTS, WORKER_FINGERPRINTS

    for line, table, where in ((log.fingerprint, FINGERPRINTS, "kv_cache_utils.py"),
                               (log.worker_fingerprint, WORKER_FINGERPRINTS, "gpu_worker.py")):
        if line in table:
            return table[line], (f"no banner; the logger line {where}:{line} is vLLM {table[line]}'s "
                                 "(docs/vllm-releases.md section 6; give --vllm-version to override)")
    if log.one_line:
        return DEFAULT_VLLM_VERSION, (
            f"no release in the log; one combined capacity line -> {DEFAULT_VLLM_VERSION} rules (give --vllm-version)"
        )
    return "0.20", "no release in the log; two capacity lines / V0 format -> the 0.20 line's rules (give --vllm-version)"


def probe_log(resolved: Any, settings: Any, path: str, *, vllm_version_given: str | None,
              tp_given: bool, pp_given: bool, kv_dtype_given: bool) -> list[Check]:
    """One check per run in the file."""
    runs = read_runs(path, memory_given=settings.kv_cache_memory is not None)
    given = {"tp": tp_given, "pp": pp_given, "kv_dtype": kv_dtype_given}
    checks = []
    for i, run in enumerate(runs):
        name = Path(path).name + (f" (run {i + 1} of {len(runs)})" if len(runs) > 1 else "")
        checks.append(_check_run(resolved, settings, run, name, vllm_version_given, given))
    if len(runs) == 1:  # the budget terms, term by term (info rows): one run's figures
        from kvcalc.probe.budget_log import budget_rows

        version = runs[0].version or rules_version(runs[0], vllm_version_given)[0]
        rows, notes = budget_rows(resolved.spec, settings.with_(vllm_version=version), path, resolved.checkpoint)
        checks[0].rows.extend(rows)
        checks[0].explanation.extend(notes)
    return checks


def _check_run(resolved: Any, settings: Any, log: VllmLog, name: str, version_given: str | None,
               given: dict[str, bool]) -> Check:
    from kvcalc.probe.vllm_log_rows import log_rows

    version, why_version = rules_version(log, version_given)
    rules, rules_note = R.rules_for(version)
    changes, notes = _settings_from_log(log, settings, version, given)
    printed, from_error = _memory_printed(log, settings.kv_cache_memory)
    from_log = bool(log.available_gib) or from_error
    lo, mid, hi = _memory_ends(printed, from_log)
    if not from_log:
        printed = f"{mid / GIB:.2f}"
        notes.append("the log prints no available memory (releases before 0.9.1 do not): --kv-cache-memory is used")
    if Decimal(printed) <= 0 and log.max_model_len is None and settings.max_model_len is None:
        L = resolved.spec.max_model_len  # nothing to size: any length is refused
    else:
        L = _max_model_len(log, settings.max_model_len)
    changes["max_model_len"] = L
    spec = resolved.spec
    if L > spec.max_model_len:  # the engine ran with it (a long-context checkpoint of this shape, or an override)
        from kvcalc.core.record import replace

        notes.append(f"the log's engine ran with max_model_len {L:,}, over {spec.name}'s {spec.max_model_len:,}: taken as given")
        spec = replace(spec, max_model_len=L)
    if len(set(log.available_gib)) > 1:
        notes.append(
            f"the log reports {len(log.available_gib)} available memories ({', '.join(log.available_gib)} GiB): vLLM takes "
            "the smallest worker's block count, so the pool is computed from the smallest"
        )

    def pool(mem: int) -> PoolReport | None:
        return _pool(resolved, spec, settings, changes, mem) if mem > 0 else None

    pools = [pool(m) for m in (lo, mid, hi)]
    if from_error and pools[1] is not None and rules.fit_check == R.FIT_NULL_BLOCK:
        # the refusal prints available - one block (0.29.0-): add the block back
        bpb = pools[1].bytes_per_block
        lo, mid, hi = lo + bpb, mid + bpb, hi + bpb
        pools = [pool(m) for m in (lo, mid, hi)]
    others = []
    if rules.log == R.LOG_PER_WORKER and len(log.pairs) > 1:  # each worker's pair reflects its own memory
        for gib in sorted(set(log.available_gib) - {printed}, key=Decimal):
            g_lo, _, g_hi = memory_range(gib)
            p_lo, p_hi = pool(g_lo), pool(g_hi)
            if p_lo is not None and p_hi is not None:
                others.append((gib, p_lo, p_hi))
    rows = log_rows(log, rules, L, printed, pools, from_error, others)
    check = Check("vllm-log", f"vLLM log {name}", f"vLLM {version} rules ({why_version})", rows)
    p_mid = pools[1]
    check.facts = LogFacts(
        log_format=log.format, vllm_version=log.version, printed_gib=printed, low_bytes=lo, high_bytes=hi,
        max_model_len=L, block_size=p_mid.block_size if p_mid else 0, bytes_per_block=p_mid.bytes_per_block if p_mid else 0,
        blocks_low=pools[0].num_blocks if pools[0] else 0, blocks_high=pools[2].num_blocks if pools[2] else 0,
    )
    check.explanation = [
        rules_note,
        "vLLM prints the available memory rounded to 0.01 GiB: the bytes it had lie within +-0.005 GiB "
        "(+-5,368,709 B) of the printed value, so each prediction is the range the two ends give",
        *notes,
    ]
    if (changes.get("tp") or settings.tp or 1) > 1 and len(log.available_gib) < (changes.get("tp") or settings.tp or 1):
        check.explanation.append(
            "with TP > 1 every worker logs its own available memory and vLLM keeps the smallest block count; "
            "a log showing only one worker's line can report fewer blocks than that line implies"
        )
    check.details = {
        "lines": log.lines,
        "rules": rules_note,
        "rule_line": rules.label,
        "settings_from_log": {k: v for k, v in changes.items() if k != "vllm_version"},
        "memory_bytes": {"low": lo, "printed": mid, "high": hi, "from": "refusal" if from_error else "Available KV cache memory"},
        "pool_low": _pool_figures(pools[0]),
        "pool_high": _pool_figures(pools[2]),
    }
    return check


def _memory_printed(log: VllmLog, given: str | None) -> tuple[str, bool]:
    """The smallest printed available memory, else the refusal's (releases before 0.9.1 print no
    Available line), else --kv-cache-memory in GiB (read as printed with 2 decimals)."""
    if log.available_gib:
        return min(log.available_gib, key=Decimal), False
    if log.error_memory_gib is not None:
        return log.error_memory_gib, True
    assert given is not None  # read_runs refuses runs without any
    return str(given), False


def _memory_ends(printed: str, from_log: bool) -> tuple[int, int, int]:
    """(low, mid, high) bytes: a logged figure is known to +-0.005 GiB; --kv-cache-memory is
    exact unless written as GiB with at most 2 decimals (copied from a log)."""
    from kvcalc.core.units import parse_size

    if from_log:
        return memory_range(printed)
    m = re.fullmatch(r"\s*(\d+(?:\.\d{1,2})?)\s*GiB\s*", printed)
    if m:
        return memory_range(m.group(1))
    b = parse_size(printed, "--kv-cache-memory")
    return b, b, b


def _settings_from_log(log: VllmLog, settings: Any, version: str, given: dict[str, bool]) -> tuple[dict[str, Any], list[str]]:
    """The settings the log names (the flags given on the command line win), and notes."""
    changes: dict[str, Any] = {"vllm_version": version}
    notes: list[str] = []
    names = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "kv_dtype": "kv_cache_dtype"}
    if log.settings.get("max_num_batched_tokens") is None and settings.max_num_batched_tokens is None:
        which = f"the release's default for --gpu {settings.gpu} and the usage context" if settings.gpu else (
            "kvcalc's default for an unknown GPU (2048)")
        notes.append(f"max_num_batched_tokens is not in the log: {which} is used; "
                     "sliding-window, chunked-local and cross-attention reservations depend on it "
                     "(give --max-num-batched-tokens)")
    if log.settings.get("speculative"):
        from kvcalc.probe.vllm_log_parse import speculative_json

        spec = speculative_json(log.settings["speculative"])
        why = _unreadable_drafter(spec) if spec is not None else "kvcalc could not read it"
        if settings.speculative_config is None and why is None:
            changes["speculative_config"] = spec
            notes.append(f"speculative_config {spec} read from the log")
        elif settings.speculative_config is None:
            notes.append(f"the log runs speculative decoding ({log.settings['speculative']}); {why}: the drafter's KV "
                         "layers are not counted (give --speculative-config)")
    for key in ("tp", "pp", "kv_dtype", "max_num_batched_tokens", "block_size", "dtype", "num_gpu_blocks_override",
                "enable_prefix_caching", "mamba_cache_mode"):
        value = log.settings.get(key)
        if value is None or value == "auto" or given.get(key) or (key not in given and getattr(settings, key) is not None):
            continue
        changes[key] = value
        notes.append(f"{names.get(key, key)} {value} read from the log")
    if log.pp_layers and settings.pp_layers is None:
        changes["pp_layers"] = log.pp_layers
        notes.append(f"VLLM_PP_LAYER_PARTITION {log.pp_layers} read from the log")
    return changes, notes


def _unreadable_drafter(spec: str) -> str | None:
    """Why the log's speculative config cannot be modelled (its draft checkpoint cannot be read here), or None."""
    from kvcalc.app.speculation import draft_spec, parse
    from kvcalc.core.speculative import DRAFT_MODEL

    try:
        req = parse(spec)
        if req.method in DRAFT_MODEL and req.model:
            draft_spec(req.model)
    except KvcalcError as exc:
        return f"its drafter cannot be read ({exc})"
    return None


def _max_model_len(log: VllmLog, given: int | None) -> int:
    L = given
    logged = log.max_model_len or log.settings.get("max_model_len")
    if logged is not None:
        if L is not None and L != logged:
            raise KvcalcError(
                f"--max-model-len {L} differs from the log's max_model_len {logged:,} ('Maximum concurrency for "
                f"{logged:,} tokens'); drop the flag or give the length the engine ran with"
            )
        L = logged
    if L is None:
        raise KvcalcError("--from-vllm-log: the log names no max_model_len ('Maximum concurrency for L tokens'); give --max-model-len")
    return L


def _pool(resolved: Any, spec: Any, settings: Any, changes: dict[str, Any], mem: int) -> PoolReport:
    """kvcalc's pool when the engine had exactly ``mem`` bytes for the KV cache."""
    from kvcalc.app.service import evaluate

    s = settings.with_(kv_cache_memory=str(mem), **changes)
    for k in ("gpu", "gpu_memory", "gpu_memory_utilization"):
        s = s.with_(**{k: None})
    res = evaluate(spec, s, checkpoint=resolved.checkpoint)
    if res.pool is None:
        raise KvcalcError(f"{spec.name}: kvcalc has no pool figures for this model (not served by vLLM)")
    return res.pool


def _pool_figures(pool: PoolReport | None) -> dict[str, Any] | None:
    if pool is None:
        return None
    return {
        "num_blocks": pool.num_blocks,
        "kv_cache_size_tokens": pool.kv_cache_size_tokens,
        "max_concurrency": pool.max_concurrency,
        "fits_max_model_len": pool.fits,
        "estimated_max_model_len": pool.estimated_max_model_len,
    }
