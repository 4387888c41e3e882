"""`kvcalc probe --from-sglang-log`: compare an SGLang launch log with kvcalc's SGLang figures.

Reads ``server_args=ServerArgs(...)``, ``Load weight begin/end ... avail mem=``, ``KV Cache
is allocated``, ``Memory pool end`` and the scheduler's ``max_total_num_tokens=`` line.
SGLang prints free memory in GiB ("GB") with 2 decimals and sizes its pool from the
smallest figure any rank printed (docs/sglang-rules.md R0, R1), so each prediction is the
range the printed figures' two ends give. Only the stdlib: no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from kvcalc.app.probe_report import Check, Row
from kvcalc.errors import KvcalcError

GIB = 1 << 30
HALF = Decimal("0.005")

_RANK = re.compile(r"\bTP(\d+)\]")
_BEGIN = re.compile(r"Load weight begin\. avail mem=([\d.]+) GB")
_END = re.compile(r"Load weight end\..*?avail mem=([\d.]+) GB")
_KV = re.compile(r"KV Cache is allocated\.(?: dtype: ([\w.]+),)?(?: #tokens: (\d+),)? (?:K size: ([\d.]+) GB, V size: ([\d.]+) GB|KV size: ([\d.]+) GB)")
_POOL_END = re.compile(r"Memory pool end\. avail mem=([\d.]+) GB")
_SCHED = re.compile(r"max_total_num_tokens=(\d+)(.*)")
_ARG = re.compile(r"(\w+)=('[^']*'|\"[^\"]*\"|[^,()\s]+)")
_ERRORS = ("Not enough memory. Please try to increase --mem-fraction-static", "Loaded weights leave no GPU memory for the KV cache")
SERVER_ARGS = ("tp_size", "dp_size", "enable_dp_attention", "mem_fraction_static", "kv_cache_dtype", "context_length",
               "chunked_prefill_size", "max_running_requests", "max_total_tokens", "page_size")


@dataclass
class SglangLog:
    server_args: dict[str, Any] = field(default_factory=dict)
    before_gib: list[str] = field(default_factory=list)  # every rank's 'Load weight begin' figure
    after_gib: list[str] = field(default_factory=list)
    kv_lines: list[dict[str, Any]] = field(default_factory=list)
    pool_end_gib: list[str] = field(default_factory=list)
    scheduler: dict[str, int] = field(default_factory=dict)
    ranks: set[int] = field(default_factory=set)
    error: str | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> int | None:
        return next((k["tokens"] for k in self.kv_lines if k["tokens"] is not None), None)

    @property
    def format(self) -> str:
        if any(k["dtype"] for k in self.kv_lines):
            return "0.5.16+ (KV line with dtype)"
        if self.tokens is not None:
            return "0.4.3.post4+ (KV line with #tokens)" + (" and available_gpu_mem" if "available_gpu_mem" in self.scheduler else "")
        return "0.4.1.post6-0.4.3.post3 (KV line without #tokens)" if self.kv_lines else "no KV line (before 0.4.1.post6)"


def looks_like_sglang(text: str) -> bool:
    """An SGLang launch log (for --from-log): its own start-up lines."""
    return any(s in text for s in ("KV Cache is allocated", "Load weight end", "max_total_num_tokens=", "server_args=ServerArgs("))


def _value(text: str) -> Any:
    t = text.strip("'\"")
    if t in ("None", "null"):
        return None
    if t in ("True", "False"):
        return t == "True"
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t


def parse_sglang_log(text: str) -> SglangLog:
    log = SglangLog()
    for line in text.splitlines():
        rank = _RANK.search(line)
        if rank:
            log.ranks.add(int(rank.group(1)))
        if "server_args=ServerArgs(" in line and not log.server_args:
            args = line.split("server_args=ServerArgs(", 1)[1]
            log.server_args = {k: _value(v) for k, v in _ARG.findall(args) if k in SERVER_ARGS}
        if m := _BEGIN.search(line):
            log.before_gib.append(m.group(1))
        if m := _END.search(line):
            log.after_gib.append(m.group(1))
        if m := _KV.search(line):
            log.kv_lines.append({"dtype": m.group(1), "tokens": int(m.group(2)) if m.group(2) else None,
                                 "k": m.group(3), "v": m.group(4), "kv": m.group(5), "line": line.strip()})
        if m := _POOL_END.search(line):
            log.pool_end_gib.append(m.group(1))
        if (m := _SCHED.search(line)) and not log.scheduler:
            log.scheduler = {"max_total_num_tokens": int(m.group(1))}
            log.scheduler.update({k: int(v) for k, v in re.findall(r"(\w+)=(\d+)\b(?!\.)", m.group(2))})
            if "available_gpu_mem" in m.group(2):
                log.scheduler["available_gpu_mem"] = 1
        if any(e in line for e in _ERRORS):
            log.error = line.strip()
        if any(s in line for s in ("avail mem", "KV Cache", "max_total_num_tokens", "server_args", *_ERRORS)):
            log.lines.append(line.strip()[:400])
    return log


def read_sglang_log(path: str) -> SglangLog:
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise KvcalcError(f"--from-sglang-log: no file {path!r}") from None
    except OSError as exc:
        raise KvcalcError(f"--from-sglang-log: cannot read {path!r}: {exc.strerror or exc}") from None
    log = parse_sglang_log(text)
    if not log.kv_lines and not log.scheduler and log.error is None:
        raise KvcalcError(f"--from-sglang-log {path}: no 'KV Cache is allocated' nor 'max_total_num_tokens=' line: nothing to compare")
    return log


def infer_version(log: SglangLog, given: str | None) -> tuple[str, str]:
    """The release whose rules apply: --sglang-version, else the oldest release printing the log's format."""
    if given:
        return given, f"--sglang-version {given}"
    if any(k["dtype"] for k in log.kv_lines):
        return "0.5.16", "the KV line names its dtype -> 0.5.16 rules (pass --sglang-version for the exact release)"
    if log.tokens is not None:
        if "available_gpu_mem" in log.scheduler:
            return "0.4.10", "#tokens and available_gpu_mem in the log -> 0.4.10 rules (pass --sglang-version)"
        return "0.4.3.post4", "the KV line has #tokens -> 0.4.3.post4 rules (pass --sglang-version)"
    if log.kv_lines:  # sglang==0.4.1.post6: python/sglang/srt/mem_cache/memory_pool.py:221 (first K/V line)
        return "0.4.1.post6", "the KV line has no #tokens -> 0.4.1.post6 rules (pass --sglang-version)"
    return "0.4.0", "no KV line -> 0.4.0 rules (before 0.4.1.post6; pass --sglang-version)"


def _bounds(printed: str) -> tuple[int, int, int]:
    v = Decimal(printed)
    return int((v - HALF) * GIB) + 1, int(v * GIB), int((v + HALF) * GIB)


def _settings(settings: Any, log: SglangLog, version: str, given: dict[str, bool]) -> tuple[Any, list[str]]:
    """The probe's settings with what the log's server_args name (flags given on the command line win)."""
    a, notes = log.server_args, []
    changes: dict[str, Any] = {"engine": "sglang", "sglang_version": version}
    for key, name in (("tp_size", "tp"), ("kv_cache_dtype", "kv_dtype"), ("mem_fraction_static", "mem_fraction_static"),
                      ("context_length", "max_model_len"), ("page_size", "block_size"), ("max_total_tokens", "max_total_tokens"),
                      ("max_running_requests", "max_running_requests"), ("chunked_prefill_size", "chunked_prefill_size")):
        if a.get(key) is not None and not given.get(name):
            changes[name] = a[key]
            notes.append(f"{key}={a[key]} read from server_args")
    if a.get("enable_dp_attention"):
        changes.update(enable_dp_attention=True, dp=a.get("dp_size") or 1)
    if "tp" not in changes and not given.get("tp") and len(log.ranks) > 1:
        changes["tp"] = max(log.ranks) + 1
        notes.append(f"tp {changes['tp']} from the TP0..TP{max(log.ranks)} prefixes")
    return settings.with_(**changes), notes


def probe_sglang_log(resolved: Any, settings: Any, path: str, *, sglang_version_given: str | None,
                     given: dict[str, bool]) -> Check:
    from kvcalc.app.service import evaluate

    log = read_sglang_log(path)
    version, why = infer_version(log, sglang_version_given)
    s, notes = _settings(settings, log, version, given)
    if s.mem_fraction_static is None and log.before_gib:
        notes.append("mem_fraction_static not in the log: SGLang's default is assumed (pass --mem-fraction-static)")
    rows: list[Row] = []
    pools: dict[str, Any] = {}
    if log.before_gib and log.after_gib:
        p, a = min(log.before_gib, key=Decimal), min(log.after_gib, key=Decimal)
        (p_lo, p_mid, p_hi), (a_lo, a_mid, a_hi) = _bounds(p), _bounds(a)
        for end, (pb, ab) in {"low": (p_hi, a_lo), "mid": (p_mid, a_mid), "high": (p_lo, a_hi)}.items():
            r = evaluate(resolved.spec, s.with_(free_before_weights=str(pb), free_after_weights=str(ab)), checkpoint=resolved.checkpoint)
            pools[end] = r.pool
        notes.append(f"sized from the smallest printed figures: before weights {p} GB, after {a} GB (GiB, +-0.005)")
        rows += _token_rows(log, pools)
    elif log.tokens is not None or "max_total_num_tokens" in log.scheduler:
        t = log.tokens if log.tokens is not None else log.scheduler["max_total_num_tokens"]
        r = evaluate(resolved.spec, s.with_(max_total_tokens=t, free_before_weights="4096GiB", free_after_weights="4000GiB"),
                     checkpoint=resolved.checkpoint)
        pools = {"low": r.pool, "mid": r.pool, "high": r.pool}
        notes.append("no 'Load weight begin/end' pair: only the sizes of the logged #tokens are checked")
    else:
        raise KvcalcError(f"--from-sglang-log {path}: neither avail mem figures nor a token count: nothing to predict from")
    rows += _size_rows(log, pools)
    rows += _scheduler_rows(log, pools["mid"])
    check = Check("sglang-log", f"SGLang log {Path(path).name}", f"SGLang {version} rules ({why})", rows)
    check.explanation = [
        "SGLang prints memory in GiB ('GB') with 2 decimals: each prediction is the range the printed figures' ends give",
        *notes,
    ]
    check.details = {"lines": log.lines, "format": log.format, "server_args": log.server_args,
                     "kvcalc_log_lines": _kv_lines(pools["mid"])}
    return check


def _kv_lines(pool: Any) -> list[str]:
    from kvcalc.core.sglang_pool import kv_log_lines

    return kv_log_lines(pool)


def _token_rows(log: SglangLog, pools: dict[str, Any]) -> list[Row]:
    lo, mid, hi = (pools[k].max_total_num_tokens for k in ("low", "mid", "high"))
    rows = []
    if log.tokens is not None:
        rows.append(Row("#tokens (KV Cache is allocated)", mid, log.tokens, unit="tokens", predicted_min=lo, predicted_max=hi,
                        note="int((A - P x (1 - mem_fraction_static)) x 2^30) // bytes per token, capped, page-rounded"))
    if "max_total_num_tokens" in log.scheduler:
        rows.append(Row("max_total_num_tokens", mid, log.scheduler["max_total_num_tokens"], unit="tokens",
                        predicted_min=lo, predicted_max=hi, note="the full-attention pool's token count"))
    if log.error:
        rows.append(Row("starts (1 yes, 0 no)", int(pools["mid"].error is None), 0, unit="",
                        predicted_min=min(int(pools[k].error is None) for k in pools),
                        predicted_max=max(int(pools[k].error is None) for k in pools), note="the log shows a start-up error"))
    return rows


def _size_rows(log: SglangLog, pools: dict[str, Any]) -> list[Row]:
    """K / V / KV sizes, in hundredths of a GiB as SGLang prints them."""
    kv = next((k for k in log.kv_lines if k["tokens"] is None or k["tokens"] == log.tokens), None)
    if kv is None:
        return []
    rows = []
    for label, key, attr in (("K size", "k", "k_bytes"), ("V size", "v", "v_bytes"), ("KV size", "kv", "k_bytes")):
        if kv[key] is None:
            continue
        ends = [round(getattr(pools[k], attr) / GIB, 2) for k in ("low", "mid", "high")]
        rows.append(Row(f"{label} (GB = GiB, 2 decimals)", ends[1], float(kv[key]), unit="",
                        predicted_min=min(ends), predicted_max=max(ends),
                        note="(tokens + padding page) x bytes per token of the buffers"))
    return rows


def _scheduler_rows(log: SglangLog, pool: Any) -> list[Row]:
    rows = []
    if "max_running_requests" in log.scheduler:
        rows.append(Row("max_running_requests", pool.max_running, log.scheduler["max_running_requests"], unit="",
                        note=pool.max_running_source))
    if "context_len" in log.scheduler:
        rows.append(Row("context_len", pool.inputs.context_len, log.scheduler["context_len"], unit="tokens",
                        note="--context-length, else the model's derived maximum"))
    if log.pool_end_gib and log.after_gib:
        after = float(min(log.after_gib, key=Decimal))
        table = (pool.max_running + 1) * (pool.inputs.context_len + 4) * 4  # req_to_token, int32
        predicted = round(after - (pool.pool_bytes_per_gpu + table) / GIB, 2)
        rows.append(Row("Memory pool end avail mem (GiB)", predicted, float(min(log.pool_end_gib, key=Decimal)), unit="", info=True,
                        note="after weights minus the KV buffers and the req_to_token table ((max_running_requests + 1) x "
                        "(context_len + 4) x 4 B); smaller allocations are not modelled"))
    return rows
