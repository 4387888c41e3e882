"""From user settings (flag values, or the same keys in a gate file) to results.

The CLI, ``compare``, ``gate`` and ``report`` all go through ``evaluate``: one place turns
settings into a parallel plan, cache settings and traffic, and calls the core.
"""

from __future__ import annotations

from typing import Any

from kvcalc.app.settings import DEFAULT_VLLM_VERSION, MAX_REQUESTS, Settings, check_bounds
from kvcalc.core.dtypes import MODEL_DTYPES, normalize_model_dtype
from kvcalc.core.footprint import CacheSettings, Footprint, Traffic, footprint, resolve_kv_dtype
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan, parse_partition
from kvcalc.core.record import record
from kvcalc.errors import KvcalcError, PlanError, named

VLLM_VERSIONS = (DEFAULT_VLLM_VERSION, "0.20")
MAX_BATCH = MAX_REQUESTS


def _nonneg(value: Any, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlanError(f"{flag} must be a non-negative integer, got {value!r}")
    return value


def _positive(value: Any, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{flag} must be a positive integer, got {value!r}")
    return value


def parse_int_list(text: str, flag: str) -> tuple[int, ...]:
    out = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            raise PlanError(f"{flag} must be comma-separated integers like 17,32, got {text!r}") from None
        if value < 0:
            raise PlanError(f"{flag} entries must be non-negative, got {value}")
        out.append(value)
    return tuple(out)


def max_model_len(model: ModelSpec, s: Settings) -> int:
    if s.max_model_len is None:
        return model.max_model_len
    n = _positive(s.max_model_len, named("max_model_len"))
    if n > model.max_model_len and model.vllm_supported:
        raise PlanError(
            f"{named('max_model_len')} {n} is larger than {model.name}'s maximum length {model.max_model_len} "
            "(derived from its config, as vLLM does); give at most that"
        )
    return n


def traffic(model: ModelSpec, s: Settings) -> Traffic:
    """The requests measured, from --tokens / --requests / --batch / --prompt --gen."""
    given = [n for n, v in (("--tokens", s.tokens), ("--requests", s.requests), ("--prompt", s.prompt)) if v is not None]
    if len(given) > 1:
        raise PlanError(f"give one of {named('tokens')}, {named('requests')}, {named('prompt')}/{named('gen')}, not {' and '.join(given)}")
    if s.gen is not None and s.prompt is None:
        raise PlanError(f"{named('gen')} needs {named('prompt')} (the cache holds prompt + gen - 1 positions)")
    batch = 1 if s.batch is None else _positive(s.batch, named("batch"))
    if batch > MAX_BATCH:  # every request is listed: 10**8 of them would take minutes and gigabytes
        raise PlanError(f"{named('batch')} {batch} is more requests than kvcalc lists one by one (limit {MAX_BATCH:,})")
    if s.requests is not None:
        if s.batch is not None:
            raise PlanError(f"{named('batch')} repeats one length; with {named('requests')} list every request instead")
        reqs = parse_int_list(s.requests, named("requests"))
        return Traffic(reqs, f"{len(reqs)} requests of {', '.join(map(str, reqs))} tokens")
    if s.prompt is not None:
        p = _nonneg(s.prompt, named("prompt"))
        g = _nonneg(s.gen if s.gen is not None else 1, named("gen"))
        if s.continuation:
            t, why = p + g, f"prompt {p} + gen {g} = {p + g} positions (kept for a continuation)"
        else:
            t = p + max(g - 1, 0)
            why = f"prompt {p} + gen {g} - 1 = {t} positions (the last token is never fed back)"
        return Traffic((t,) * batch, f"{batch} x ({why})" if batch > 1 else why)
    if s.tokens is not None:
        t = _nonneg(s.tokens, named("tokens"))
        return Traffic((t,) * batch, f"{batch} requests of {t} tokens" if batch > 1 else f"1 request of {t} tokens")
    t = max_model_len(model, s)
    return Traffic((t,) * batch, f"{batch} request(s) of max_model_len {t} tokens (no --tokens given)")


def plan(s: Settings) -> ParallelPlan:
    partition = parse_partition(s.pp_layers) if s.pp_layers else None
    return ParallelPlan(
        tp=_positive(s.tp, named("tp")),
        pp=_positive(s.pp, named("pp")),
        dp=_positive(s.dp, named("dp")),
        pp_layers=partition,
        gpus_per_node=_positive(s.gpus_per_node, named("gpus_per_node")),
    )


def model_dtype(model: ModelSpec, s: Settings) -> str:
    if s.dtype is None or s.dtype == "auto":
        return model.dtype
    dt = normalize_model_dtype(s.dtype)
    if dt is None:
        raise PlanError(f"{named('dtype')} {s.dtype!r} is not known; valid: auto, {', '.join(MODEL_DTYPES)}")
    return dt


def check_version(s: Settings) -> str:
    v = str(s.vllm_version).strip()
    v = {"0.33.0": "0.33", "0.20.0": "0.20", "0.20.2": "0.20", "v0.33": "0.33", "v0.20": "0.20"}.get(v, v)
    if v not in VLLM_VERSIONS:
        raise PlanError(f"{named('vllm_version')} {s.vllm_version!r} has no rules in kvcalc; valid: {', '.join(VLLM_VERSIONS)}")
    return v


def cache_settings(model: ModelSpec, s: Settings, *, block_size: int) -> CacheSettings:
    mdt = model_dtype(model, s)
    kv = resolve_kv_dtype(s.kv_dtype, model, mdt)
    check_version(s)
    return CacheSettings(
        kv_dtype=kv,
        block_size=block_size,
        mamba_dtype_bytes=MODEL_DTYPES[mdt],
        mamba_ssm_dtype_bytes=MODEL_DTYPES[mdt],
    )


def default_block_size(model: ModelSpec, s: Settings) -> int:
    """16 (vLLM's default) unless --block-size or an MLA backend that needs another."""
    if s.block_size is not None:
        return _positive(s.block_size, named("block_size"))
    if s.attention_backend:
        from kvcalc.core.engine import backend_block_size

        return backend_block_size(s.attention_backend, model)
    return 16


@record
class SizeResult:
    model: ModelSpec
    settings: Settings
    footprint: Footprint
    max_model_len: int
    vllm_version: str
    pool: Any = None  # kvcalc.core.pool.PoolReport when a GPU, memory or pool is given
    notes: tuple[str, ...] = ()
    checkpoint: dict | None = None


def check_settings(model: ModelSpec, s: Settings) -> None:
    """The checks that do not depend on the parallel plan (``fit`` runs them before its search,
    so a wrong flag is one error, not a list of rejected plans)."""
    check_bounds(s)
    check_version(s)
    max_model_len(model, s)
    cache_settings(model, s, block_size=default_block_size(model, s))
    if s.gpu is not None:
        from kvcalc.core.gpus import find_gpu

        find_gpu(s.gpu)


def evaluate(model: ModelSpec, s: Settings, *, checkpoint: dict | None = None) -> SizeResult:
    check_bounds(s)  # before anything is built: every size is bounded (kvcalc.app.settings)
    if s.encoder_tokens is not None:
        from kvcalc.sources.config import with_encoder_tokens

        if not model.encoder_decoder:
            raise PlanError(f"{named('encoder_tokens')} applies to encoder-decoder models; {model.name} is decoder-only")
        model = with_encoder_tokens(model, _positive(s.encoder_tokens, named("encoder_tokens")))
    version = check_version(s)
    mml = max_model_len(model, s)
    bs = default_block_size(model, s)
    cache = cache_settings(model, s, block_size=bs)
    p = plan(s)
    notes = list(model.notes)
    if any(layer.kind == "mamba" for layer in model.layers):
        from kvcalc.core.footprint import check_tp
        from kvcalc.core.pool import engine_cache

        check_tp(model, p.tp)
        cache, _, cache_notes = engine_cache(model, p, cache)
        notes.extend(cache_notes)
    fp = footprint(model, p, cache, traffic(model, s))
    pool = None
    if s.has_pool:
        if not model.vllm_supported:
            notes.append(f"vLLM does not serve {model.model_type}: no pool figures")
        else:
            from kvcalc.app.budget import budget_inputs
            from kvcalc.core.pool import pool_report

            inputs = budget_inputs(model, s, p, cache, mml, version, checkpoint)
            pool = pool_report(model, p, cache, inputs)
            notes.extend(n for n in pool.notes if n not in notes)
    return SizeResult(model, s, fp, mml, version, pool, tuple(notes), checkpoint)


def settings_from_mapping(data: dict, *, where: str = "") -> Settings:
    """Settings from a gate-file mapping (same names as the flags, '-' or '_')."""
    known = {n: n for n in Settings.names()}
    values: dict[str, Any] = {}
    for key, value in data.items():
        k = str(key).replace("-", "_")
        if k not in known:
            raise KvcalcError(f"{where}unknown key {key!r}")
        values[k] = value
    return Settings(**values)
