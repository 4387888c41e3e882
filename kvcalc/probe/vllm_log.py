"""Check 4: the figures a vLLM start-up log reports, against kvcalc's pool for the same memory.

Lines read (any prefix, any order):

- V1 ``Available KV cache memory: 6.51 GiB`` (``gpu_worker.py``, one per worker);
- V1 ``GPU KV cache size: 42,656 tokens`` and ``Maximum concurrency for 32,768 tokens per
  request: 1.30x``: two lines up to the 0.20 line, one line joined by ", " in 0.33;
- V0 ``# GPU blocks: 1478, # CPU blocks: 2048`` (also ``# cuda blocks``), with the memory from
  ``Memory profiling results: ... kv_cache_size=2.89GiB`` or ``... the rest of the memory
  reserved for KV Cache is 1.57GiB.``;
- where present: the engine version and ``tensor_parallel_size`` / ``pipeline_parallel_size``
  / ``kv_cache_dtype`` from the engine's config line (flags given on the command line win).

vLLM prints the memory rounded to 0.01 GiB (``round(bytes / 2**30, 2)``), so the memory it
had is only known to within +-0.005 GiB (about 5.4 MB). kvcalc computes its pool at both
ends of that range, and a logged block count, token figure or concurrency agrees when it
lies inside what the two ends give (the concurrency rounded to 2 decimals as printed).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.app.probe_report import Check, LogFacts, Row
from kvcalc.errors import KvcalcError

if TYPE_CHECKING:
    from kvcalc.core.pool import PoolReport

GIB = 1 << 30
HALF = Decimal("0.005")

_NUM = r"(-?\d{1,15}(?:\.\d{1,15})?)"  # a log's figures are short: 5,000 digits are not read as one
AVAILABLE = [
    re.compile(r"Available KV cache memory:\s*" + _NUM + r"\s*GiB"),
    re.compile(r"kv_cache_size=" + _NUM + r"\s*GiB"),
    re.compile(r"the rest of the memory reserved for KV Cache is\s*" + _NUM + r"\s*GiB"),
]
TOKENS = re.compile(r"KV cache size:\s*(\d[\d,]{0,24})\s*tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for\s*(\d[\d,]{0,24})\s*tokens per request:\s*(\d{1,15}(?:\.\d{1,15})?)x")
BLOCKS = re.compile(r"(?:GPU|cuda) blocks:\s*(\d[\d,]{0,24})\b", re.IGNORECASE)
VERSION = [
    re.compile(r"LLM engine \(v(\d+\.\d+(?:\.\d+)?)"),
    re.compile(r"\bversion\s+(\d+\.\d+\.\d+)"),
]
TP = re.compile(r"tensor_parallel_size['\"]?\s*[=:]\s*(\d{1,7})\b")
PP = re.compile(r"pipeline_parallel_size['\"]?\s*[=:]\s*(\d{1,7})\b")
KV_DTYPE = re.compile(r"kv_cache_dtype['\"]?\s*[=:]\s*['\"]?([A-Za-z0-9_]+)")
DOES_NOT_FIT = re.compile(
    r"(larger than the maximum number of tokens that can be stored in KV cache"
    r"|To serve at least one request with the model'?s'? max seq len"
    r"|No available memory for the cache blocks)"
)


@dataclass
class VllmLog:
    available_gib: list[str] = field(default_factory=list)  # as printed
    tokens: int | None = None
    concurrency: float | None = None
    concurrency_text: str | None = None
    max_model_len: int | None = None
    gpu_blocks: int | None = None
    one_line: bool = False
    version: str | None = None
    tp: int | None = None
    pp: int | None = None
    kv_cache_dtype: str | None = None
    does_not_fit: bool = False
    lines: list[str] = field(default_factory=list)

    @property
    def format(self) -> str:
        if self.one_line:
            return "V1, one capacity line (0.33 and later)"
        if self.tokens is not None or (self.concurrency is not None and self.gpu_blocks is None):
            return "V1, two capacity lines (up to the 0.20 line)"
        if self.gpu_blocks is not None:
            return "V0 (# GPU blocks)"
        return "unknown"


def parse_log(text: str) -> VllmLog:
    log = VllmLog()
    for raw in text.splitlines():
        line = raw.rstrip()
        hit = False
        for rx in AVAILABLE:
            m = rx.search(line)
            if m:
                log.available_gib.append(m.group(1))
                hit = True
        m = TOKENS.search(line)
        if m and log.tokens is None:
            log.tokens = int(m.group(1).replace(",", ""))
            hit = True
        c = CONCURRENCY.search(line)
        if c and log.concurrency is None:
            log.max_model_len = int(c.group(1).replace(",", ""))
            log.concurrency_text = c.group(2)
            log.concurrency = float(c.group(2))
            log.one_line = bool(m)
            hit = True
        b = BLOCKS.search(line)
        if b and log.gpu_blocks is None:
            log.gpu_blocks = int(b.group(1).replace(",", ""))
            hit = True
        if DOES_NOT_FIT.search(line):
            log.does_not_fit = True
            hit = True
        if log.version is None:
            for rx in VERSION:
                v = rx.search(line)
                if v:
                    log.version = v.group(1)
                    break
        for rx, attr in ((TP, "tp"), (PP, "pp")):
            v = rx.search(line)
            if v and getattr(log, attr) is None:
                setattr(log, attr, int(v.group(1)))
        v = KV_DTYPE.search(line)
        if v and log.kv_cache_dtype is None:
            log.kv_cache_dtype = v.group(1)
        if hit:
            log.lines.append(line.strip())
    return log


MAX_LOG_BYTES = 32 << 20  # a start-up log is a few hundred KiB; the capacity lines come in its first minutes


def read_log(path: str) -> VllmLog:
    from kvcalc.sources.files import read_limited

    try:
        p = Path(path).expanduser()
        if not p.exists():
            raise KvcalcError(f"--from-vllm-log: no file {path!r}")
        # bounded: a regular file is sized first, /dev/zero stops at the limit, an idle FIFO after a wait
        raw = read_limited(p, MAX_LOG_BYTES, "--from-vllm-log")
    except KvcalcError as exc:
        raise KvcalcError(f"{exc.message}; give the engine's start-up log (the first few thousand lines)") from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: ~unknownuser
        raise KvcalcError(f"--from-vllm-log: cannot read {path!r}: {getattr(exc, 'strerror', None) or exc}") from None
    log = parse_log(raw.decode("utf-8", errors="replace"))
    if not log.available_gib:
        raise KvcalcError(
            f"--from-vllm-log {path}: no 'Available KV cache memory: X GiB' (V1) nor 'kv_cache_size=XGiB' / "
            "'reserved for KV Cache is XGiB' (V0) line found; paste the engine's start-up log"
        )
    if log.tokens is None and log.concurrency is None and log.gpu_blocks is None:
        raise KvcalcError(
            f"--from-vllm-log {path}: no 'GPU KV cache size', 'Maximum concurrency for' nor '# GPU blocks' line "
            "found: nothing to compare"
        )
    return log


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
    if given is not None:
        return given, f"--vllm-version {given}"
    if log.version:
        parts = tuple(int(x) for x in log.version.split(".")[:2])
        if parts >= (0, 33):
            return "0.33", f"the log's vLLM {log.version} -> 0.33 rules"
        return "0.20", f"the log's vLLM {log.version} predates 0.33 -> the 0.20-line rules (the oldest kvcalc has)"
    if log.one_line:
        return "0.33", "one combined capacity line -> 0.33 rules"
    return "0.20", "two capacity lines / V0 format -> the 0.20-line rules (the oldest kvcalc has)"


def probe_log(resolved: Any, settings: Any, path: str, *, vllm_version_given: str | None,
              tp_given: bool, pp_given: bool, kv_dtype_given: bool) -> Check:
    log = read_log(path)
    version, why_version = rules_version(log, vllm_version_given)
    changes, notes = _settings_from_log(log, version, tp_given=tp_given, pp_given=pp_given,
                                        kv_dtype_given=kv_dtype_given)
    L = _max_model_len(log, settings.max_model_len)
    changes["max_model_len"] = L
    available = log.available_gib
    printed = min(available, key=Decimal)
    if len(set(available)) > 1:
        notes.append(
            f"the log reports {len(available)} different available memories ({', '.join(sorted(set(available), key=Decimal))} GiB): "
            "vLLM takes the smallest worker's block count, so the smallest is used"
        )
    lo, mid, hi = memory_range(printed)
    p_lo, p_mid, p_hi = (_pool(resolved, settings, changes, mem) for mem in (lo, mid, hi))
    rows = _log_rows(log, version, L, p_lo, p_mid, p_hi)
    check = Check("vllm-log", f"vLLM log {Path(path).name}", f"vLLM {version} rules ({why_version})", rows)
    check.facts = LogFacts(
        log_format=log.format, vllm_version=log.version, printed_gib=printed, low_bytes=lo, high_bytes=hi,
        max_model_len=L, block_size=p_mid.block_size, bytes_per_block=p_mid.bytes_per_block,
        blocks_low=p_lo.num_blocks, blocks_high=p_hi.num_blocks,
    )
    check.explanation = [
        "vLLM prints the available memory rounded to 0.01 GiB: the bytes it had lie within +-0.005 GiB "
        "(+-5,368,709 B) of the printed value, so each prediction is the range the two ends give",
        *notes,
    ]
    if (changes.get("tp") or settings.tp or 1) > 1:
        check.explanation.append(
            "with TP > 1 every worker logs its own available memory and vLLM keeps the smallest block count; "
            "a log showing only one worker's line can report fewer blocks than that line implies"
        )
    check.details = {
        "lines": log.lines,
        "rules": version,
        "memory_bytes": {"low": lo, "printed": mid, "high": hi},
        "pool_low": _pool_figures(p_lo),
        "pool_high": _pool_figures(p_hi),
    }
    return check


def _settings_from_log(log: VllmLog, version: str, *, tp_given: bool, pp_given: bool,
                       kv_dtype_given: bool) -> tuple[dict[str, Any], list[str]]:
    """The settings the log names (the flags given on the command line win), and notes."""
    changes: dict[str, Any] = {"vllm_version": version}
    notes: list[str] = []
    if not tp_given and log.tp:
        changes["tp"] = log.tp
        notes.append(f"tensor_parallel_size {log.tp} read from the log")
    if not pp_given and log.pp:
        changes["pp"] = log.pp
        notes.append(f"pipeline_parallel_size {log.pp} read from the log")
    if not kv_dtype_given and log.kv_cache_dtype and log.kv_cache_dtype != "auto":
        changes["kv_dtype"] = log.kv_cache_dtype
        notes.append(f"kv_cache_dtype {log.kv_cache_dtype} read from the log")
    return changes, notes


def _max_model_len(log: VllmLog, given: int | None) -> int:
    L = given
    if log.max_model_len is not None:
        if L is not None and L != log.max_model_len:
            raise KvcalcError(
                f"--max-model-len {L} differs from the log's 'Maximum concurrency for {log.max_model_len:,} tokens'; "
                "drop the flag or give the length the engine ran with"
            )
        L = log.max_model_len
    if L is None:
        raise KvcalcError("--from-vllm-log: the log names no max_model_len ('Maximum concurrency for L tokens'); give --max-model-len")
    return L


def _pool(resolved: Any, settings: Any, changes: dict[str, Any], mem: int) -> PoolReport:
    """kvcalc's pool when the engine had exactly ``mem`` bytes for the KV cache."""
    from kvcalc.app.service import evaluate

    s = settings.with_(kv_cache_memory=str(mem), **changes)
    for k in ("gpu", "gpu_memory", "gpu_memory_utilization"):
        s = s.with_(**{k: None})
    res = evaluate(resolved.spec, s, checkpoint=resolved.checkpoint)
    if res.pool is None:
        raise KvcalcError(f"{resolved.spec.name}: kvcalc has no pool figures for this model (not served by vLLM)")
    return res.pool


def _pool_figures(pool: PoolReport) -> dict[str, Any]:
    return {
        "num_blocks": pool.num_blocks,
        "kv_cache_size_tokens": pool.kv_cache_size_tokens,
        "max_concurrency": pool.max_concurrency,
    }


def _log_rows(log: VllmLog, version: str, L: int, p_lo: PoolReport, p_mid: PoolReport, p_hi: PoolReport) -> list[Row]:
    """One row per figure the log reports, each predicted as the range the memory's two ends give."""
    bs = p_mid.block_size
    rows: list[Row] = []
    if log.gpu_blocks is not None:
        rows.append(
            Row(
                "GPU blocks (# GPU blocks)",
                p_mid.num_blocks,
                log.gpu_blocks,
                unit="blocks",
                predicted_min=p_lo.num_blocks,
                predicted_max=p_hi.num_blocks,
                note=f"available // bytes_per_block ({p_mid.bytes_per_block:,} B), null block included",
            )
        )
    if log.tokens is not None:
        t_lo, t_hi = p_lo.kv_cache_size_tokens, p_hi.kv_cache_size_tokens
        note = "int(max_concurrency x max_model_len), as vLLM 0.20 and 0.33 print it"
        if version == "0.20" and not log.one_line:
            # releases before the 0.20 line printed num_blocks x block_size
            t_lo, t_hi = min(t_lo, p_lo.num_blocks * bs), max(t_hi, p_hi.num_blocks * bs)
            note += "; releases before the 0.20 line printed num_blocks x block_size, also allowed"
        rows.append(
            Row(
                "GPU KV cache size",
                p_mid.kv_cache_size_tokens,
                log.tokens,
                unit="tokens",
                predicted_min=t_lo,
                predicted_max=t_hi,
                note=note,
            )
        )
    if log.concurrency is not None:
        c_lo, c_hi = float(f"{p_lo.max_concurrency:.2f}"), float(f"{p_hi.max_concurrency:.2f}")
        rows.append(
            Row(
                f"Maximum concurrency for {L:,} tokens",
                round(p_mid.max_concurrency, 4),
                log.concurrency,
                unit="x",
                predicted_min=c_lo,
                predicted_max=c_hi,
                note=f"num_blocks / {p_mid.blocks_per_request} blocks per request, printed with 2 decimals",
            )
        )
    if log.does_not_fit:
        fits = (int(p_lo.fits), int(p_hi.fits))
        rows.append(
            Row(
                "fits max_model_len (1 yes, 0 no)",
                int(p_mid.fits),
                0,
                unit="",
                predicted_min=min(fits),
                predicted_max=max(fits),
                note="the log shows vLLM's does-not-fit error",
            )
        )
    return rows
