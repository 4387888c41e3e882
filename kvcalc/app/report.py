"""`kvcalc report`: everything a capacity review shows, collected as data (no I/O).

Every figure comes from ``kvcalc.app.service.evaluate`` with one ``Settings``: the main
evaluation, then sweeps that change one knob at a time (the request length, the
max_model_len the pool is planned for, the TP size, the KV cache dtype). Rendering lives in
``kvcalc.render.report``; the charts' SVG in ``kvcalc.render.svg``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvcalc.app.service import Settings, SizeResult, evaluate
from kvcalc.core.model import ModelSpec
from kvcalc.errors import KvcalcError

TP_SIZES = (1, 2, 4, 8, 16)
CONTEXT_POINTS = 48  # evenly spaced request lengths for the KV-vs-context curve
POOL_FLAGS = dict(gpu=None, gpu_memory=None, kv_cache_memory=None, num_gpu_blocks_override=None)
TRAFFIC_FLAGS = dict(tokens=None, requests=None, batch=None, prompt=None, gen=None, continuation=False)

Progress = Callable[[str], None]  # called once per evaluation with what is being evaluated


@dataclass(frozen=True)
class ModelInput:
    spec: ModelSpec
    checkpoint: dict | None = None
    kind: str = ""  # preset | file | hub
    source: str = ""


@dataclass(frozen=True)
class TpRow:
    tp: int
    bytes_per_token_per_rank: int | None
    kv_heads_per_rank: int | None
    replicated: bool
    error: str | None = None


@dataclass(frozen=True)
class DtypeRow:
    label: str  # what the flag says, e.g. "auto (bfloat16)"
    kv_dtype: str  # the storage dtype it resolves to
    bytes_per_token: int | None
    bytes_per_token_per_rank: int | None
    block_rounded_bytes_per_rank: int | None
    pool_tokens: int | None = None
    max_concurrency: float | None = None
    fits: bool | None = None
    error: str | None = None


@dataclass(frozen=True)
class ConcurrencyPoint:
    max_model_len: int
    max_concurrency: float
    fits: bool
    pool_tokens: int


@dataclass(frozen=True)
class Assumption:
    what: str
    value: str
    source: str
    flag: str  # the flag that replaces it ("" when none does)


@dataclass(frozen=True)
class ModelReport:
    model: ModelInput
    result: SizeResult
    context: tuple[tuple[int, int], ...]  # (request length, block-rounded KV bytes of the largest rank)
    concurrency: tuple[ConcurrencyPoint, ...]  # empty without a pool
    tp_sweep: tuple[TpRow, ...]
    dtypes: tuple[DtypeRow, ...]
    assumptions: tuple[Assumption, ...]

    @property
    def name(self) -> str:
        return self.result.footprint.model.name

    @property
    def pool_bytes_per_rank(self) -> int | None:
        return self.result.pool.pool_bytes_per_gpu if self.result.pool is not None else None


@dataclass(frozen=True)
class Report:
    settings: Settings
    models: tuple[ModelReport, ...]
    command: str = ""
    version: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def has_pool(self) -> bool:
        return any(m.result.pool is not None for m in self.models)

    @property
    def title(self) -> str:
        names = ", ".join(m.name for m in self.models)
        return f"KV cache review: {names}"


# ---------------------------------------------------------------------------- sweeps


def context_lengths(limit: int, marks: Sequence[int] = (), points: int = CONTEXT_POINTS) -> list[int]:
    """Evenly spaced request lengths from 0 to ``limit``, plus the lengths in ``marks``."""
    if limit < 1:
        return [0]
    values = {round(limit * i / points) for i in range(points + 1)}
    values.update(m for m in marks if 0 <= m <= limit)
    return sorted(values)


def max_model_lens(limit: int, chosen: int) -> list[int]:
    """Powers of two from 512 up to ``limit``, plus ``limit`` and the chosen max_model_len."""
    values = {limit, chosen}
    n = 512
    while n < limit:
        values.add(n)
        n *= 2
    return sorted(v for v in values if 1 <= v <= limit)


def _context_curve(spec: ModelSpec, base: Settings, limit: int, mark: int, tick: Progress) -> tuple[tuple[int, int], ...]:
    s0 = base.with_(**POOL_FLAGS, **TRAFFIC_FLAGS)
    out = []
    for t in context_lengths(limit, [mark]):
        tick(f"{spec.name}: {t} tokens")
        r = evaluate(spec, s0.with_(tokens=t))
        out.append((t, r.footprint.block_rounded_bytes_per_rank))
    return tuple(out)


def _concurrency_curve(spec: ModelSpec, base: Settings, chosen: int, tick: Progress, checkpoint: dict | None) -> tuple[ConcurrencyPoint, ...]:
    out = []
    for n in max_model_lens(spec.max_model_len, chosen):
        tick(f"{spec.name}: pool at max_model_len {n}")
        r = evaluate(spec, base.with_(max_model_len=n, **{**TRAFFIC_FLAGS, "tokens": 0}), checkpoint=checkpoint)
        p = r.pool
        if p is None:  # pragma: no cover - only called with pool settings
            continue
        out.append(ConcurrencyPoint(n, float(p.max_concurrency), bool(p.fits), int(p.pool_tokens)))
    return tuple(out)


def _tp_sweep(spec: ModelSpec, base: Settings, tick: Progress) -> tuple[TpRow, ...]:
    s0 = base.with_(**POOL_FLAGS, **{**TRAFFIC_FLAGS, "tokens": 0}, dp=1, pp_layers=None)
    rows = []
    for tp in TP_SIZES:
        tick(f"{spec.name}: TP {tp}")
        try:
            r = evaluate(spec, s0.with_(tp=tp))
        except KvcalcError as exc:
            rows.append(TpRow(tp, None, None, False, exc.message))
            continue
        fp = r.footprint
        rank = max(fp.ranks, key=lambda x: x.bytes_per_token)
        rows.append(TpRow(tp, fp.bytes_per_token_per_rank, rank.kv_heads, rank.replicated))
    return tuple(rows)


def kv_dtype_choices(spec: ModelSpec, chosen: str) -> list[str]:
    """auto (the model dtype), fp8, the packed MLA format for MLA models, and the one chosen."""
    out = ["auto", "fp8"] + (["fp8_ds_mla"] if spec.mla else [])
    if chosen.strip().lower() not in out:
        out.append(chosen.strip().lower())
    return out


def _dtype_sweep(spec: ModelSpec, base: Settings, tick: Progress, checkpoint: dict | None) -> tuple[DtypeRow, ...]:
    rows = []
    for name in kv_dtype_choices(spec, base.kv_dtype):
        tick(f"{spec.name}: kv dtype {name}")
        try:
            r = evaluate(spec, base.with_(kv_dtype=name), checkpoint=checkpoint)
        except KvcalcError as exc:
            rows.append(DtypeRow(name, name, None, None, None, error=exc.message))
            continue
        fp = r.footprint
        stored = fp.cache.kv_dtype.name
        label = f"auto ({stored})" if name == "auto" else name
        p = r.pool
        rows.append(
            DtypeRow(
                label,
                stored,
                fp.bytes_per_token,
                fp.bytes_per_token_per_rank,
                fp.block_rounded_bytes_per_rank,
                int(p.pool_tokens) if p is not None else None,
                float(p.max_concurrency) if p is not None else None,
                bool(p.fits) if p is not None else None,
            )
        )
    return tuple(rows)


# ------------------------------------------------------------------------ assumptions

_FLAG_RE = re.compile(r"--[a-z][a-z0-9-]+")
# a note that names the flag replacing what it assumes: "... (--encoder-tokens)", "pass --x"
_ADVICE_RE = re.compile(r"(?:\(|\b(?:pass|use|give|with) )(--[a-z][a-z0-9-]+)")
_TERM_FLAGS = (
    ("mem_fraction_static", "--mem-fraction-static"),
    ("free before", "--free-before-weights"),
    ("free after", "--free-after-weights"),
    ("weights", "--weights-bytes"),
    ("activation", "--activation-bytes"),
    ("non-torch", "--overhead-bytes"),
    ("CUDA graphs", "--cudagraph-bytes"),
    ("requested", "--gpu-memory-utilization"),
    ("GPU memory", "--gpu-memory"),
)


def _flag_for(text: str, default: str = "") -> str:
    m = _FLAG_RE.search(text)
    return m.group(0) if m else default


def assumptions(result: SizeResult) -> list[Assumption]:
    """What the figures assume rather than know, each with the flag that replaces it."""
    from kvcalc.core.units import format_bytes

    s = result.settings
    fp = result.footprint
    out: list[Assumption] = []
    if s.max_model_len is None:
        out.append(Assumption("max_model_len", f"{result.max_model_len:,} tokens", "derived from the config, as vLLM does",
                              "--max-model-len"))
    if s.block_size is None:
        if result.engine == "sglang":
            out.append(Assumption("page size", f"{fp.cache.block_size} tokens", "SGLang's default page_size", "--page-size"))
        else:
            out.append(Assumption("block size", f"{fp.cache.block_size} tokens",
                                  "vLLM's default for the usual backends" if not s.attention_backend else s.attention_backend,
                                  "--block-size"))
    if s.kv_dtype.strip().lower() == "auto":
        out.append(Assumption("KV cache dtype", f"{fp.cache.kv_dtype.name} ({fp.cache.kv_dtype.bytes} B)",
                              "auto: the model dtype", "--kv-dtype"))
    if s.tokens is None and s.requests is None and s.prompt is None:
        out.append(Assumption("traffic", fp.traffic.description, "no request given: one request of max_model_len",
                              "--tokens / --requests / --prompt --gen"))
    pool = result.pool
    if pool is None:
        if s.has_pool:
            out.append(Assumption("KV pool", "not computed", f"vLLM does not serve {fp.model.model_type}", ""))
        else:
            out.append(Assumption("KV pool", "not computed", "no GPU given",
                                  "--gpu / --gpu-memory / --kv-cache-memory"))
    else:
        i = pool.inputs
        seen: set[str] = set()
        for stage in i.terms:
            for t in stage:
                src = t.source
                if t.name in seen or src == "derived" or src.startswith("--") or src.startswith("catalog"):
                    continue
                seen.add(t.name)
                flag = next((f for key, f in _TERM_FLAGS if key in t.name), "") or _flag_for(src)
                out.append(Assumption(t.name.lstrip("-= ").strip(), format_bytes(t.bytes), src, flag))
        if not i.max_num_batched_tokens_source.startswith("--"):
            sglang = i.max_num_batched_tokens_source.startswith("SGLang")
            out.append(Assumption("chunked_prefill_size" if sglang else "max_num_batched_tokens", f"{i.max_num_batched_tokens:,}",
                                  i.max_num_batched_tokens_source,
                                  "--chunked-prefill-size" if sglang else "--max-num-batched-tokens"))
        if not i.max_concurrent_batches_source.startswith(("--", "SGLang")):
            out.append(Assumption("batches in flight", str(i.max_concurrent_batches), i.max_concurrent_batches_source,
                                  "--max-concurrent-batches"))
    for note in result.notes:
        m = _ADVICE_RE.search(note)
        out.append(Assumption("note", "", note, m.group(1) if m else ""))
    return out


# ----------------------------------------------------------------------------- build


def count_evaluations(models: Sequence[ModelInput], settings: Settings) -> int:
    """How many evaluations ``build_report`` runs (for a progress bar)."""
    n = 0
    for mi in models:
        mml = settings.max_model_len or mi.spec.max_model_len
        n += 1 + len(context_lengths(mi.spec.max_model_len, [mml])) + len(TP_SIZES)
        n += len(kv_dtype_choices(mi.spec, settings.kv_dtype))
        if settings.has_pool and mi.spec.vllm_supported:
            n += len(max_model_lens(mi.spec.max_model_len, mml))
    return n


def build_report(
    models: Sequence[ModelInput],
    settings: Settings,
    *,
    command: str = "",
    progress: Progress | None = None,
) -> Report:
    from kvcalc import __version__

    if not models:
        raise KvcalcError("give at least one MODEL")
    tick = progress or (lambda _label: None)
    out = []
    for mi in models:
        tick(f"{mi.spec.name}: main evaluation")
        result = evaluate(mi.spec, settings, checkpoint=mi.checkpoint)
        limit = mi.spec.max_model_len
        curve = _context_curve(mi.spec, settings, limit, result.max_model_len, tick)
        conc: tuple[ConcurrencyPoint, ...] = ()
        if result.pool is not None:
            conc = _concurrency_curve(mi.spec, settings, result.max_model_len, tick, mi.checkpoint)
        out.append(
            ModelReport(
                model=mi,
                result=result,
                context=curve,
                concurrency=conc,
                tp_sweep=_tp_sweep(mi.spec, settings, tick),
                dtypes=_dtype_sweep(mi.spec, settings, tick, mi.checkpoint),
                assumptions=tuple(assumptions(result)),
            )
        )
    notes = []
    if not settings.has_pool:
        notes.append("no GPU given: the pool, its budget and the concurrency chart need --gpu, --gpu-memory or --kv-cache-memory")
    return Report(settings, tuple(out), command, __version__, tuple(notes))
