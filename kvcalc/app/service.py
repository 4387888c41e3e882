"""From user settings (flag values, or the same keys in a gate file) to results.

The CLI, ``compare``, ``gate`` and ``report`` all go through ``evaluate``: one place turns
settings into a parallel plan, cache settings and traffic, and calls the core.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from kvcalc.app.mamba_state import mamba_fields, ssm_state_dtype
from kvcalc.app.settings import INERT, MAX_REQUESTS, TABLE, TRAFFIC_SETTINGS, Settings, check_bounds
from kvcalc.core.dtypes import MODEL_DTYPES, KVDtype, normalize_model_dtype
from kvcalc.core.footprint import CacheSettings, Footprint, Traffic, footprint, resolve_kv_dtype, stage_layout
from kvcalc.core.memo import Memo
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan, parse_partition
from kvcalc.core.record import record, replace
from kvcalc.core.vllm_rules import RuleLine, parse_release, rules_for
from kvcalc.errors import KvcalcError, PlanError, named
from kvcalc.words import plural

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


def derived_max_model_len(model: ModelSpec, s: Settings) -> int:
    """The model's longest context as the release derives it from the config (YaRN differs before 0.30)."""
    legacy = model.max_model_len_yarn_original
    if legacy is not None and s.engine == "vllm" and release_rules(s)[0].yarn_len_from_original:
        return legacy
    return model.max_model_len


def max_model_len(model: ModelSpec, s: Settings) -> int:
    derived = derived_max_model_len(model, s)
    if s.max_model_len is None:
        return derived
    n = _positive(s.max_model_len, named("max_model_len"))
    if n > derived and model.vllm_supported:
        raise PlanError(
            f"{named('max_model_len')} {n} is larger than {model.name}'s maximum length {derived} "
            "(derived from its config, as vLLM does); give at most that"
        )
    return n


_traffics: Memo[Traffic] = Memo(1024)


def traffic(model: ModelSpec, s: Settings) -> Traffic:
    """The requests measured, from --tokens / --requests / --batch / --prompt --gen (kept per
    distinct traffic settings: a sweep measures a few traffics on many plans)."""
    key: tuple = (s.tokens, s.requests, s.batch, s.prompt, s.gen, s.continuation)
    if s.tokens is None and s.requests is None and s.prompt is None:
        key = (*key, max_model_len(model, s))  # the default request: the model's longest
    return _traffics.get(key, _traffic, model, s)


def _traffic(model: ModelSpec, s: Settings) -> Traffic:
    check_bounds(s, traffic_only=True)  # first: a traffic is cached only for values within their bounds
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
        return Traffic(reqs, f"{plural(len(reqs), 'request')} of {', '.join(map(str, reqs))} tokens" if len(reqs) != 1 else f"1 request of {plural(reqs[0], 'token')}")
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
        return Traffic((t,) * batch, f"{plural(batch, 'request')} of {plural(t, 'token')}")
    t = max_model_len(model, s)
    return Traffic((t,) * batch, f"{plural(batch, 'request')} of max_model_len {t} tokens (no --tokens given)")


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
    """The release string as given (any string vLLM prints: 0.10.1.1, v0.22.0, 0.26.1rc1.dev156+g...);
    refused when it is not one or predates the V1 engine."""
    v = str(s.vllm_version).strip()
    rules_for(v)
    return v


def release_rules(s: Settings) -> tuple[RuleLine, str]:
    """The rule line of --vllm-version and the sentence naming it ("vLLM 0.19.1: rules of 0.19.0–0.19.x")."""
    return rules_for(str(s.vllm_version).strip())


def cache_settings(model: ModelSpec, s: Settings, *, block_size: int) -> CacheSettings:
    mdt = model_dtype(model, s)
    kv = resolve_kv_dtype(s.kv_dtype, model, mdt)
    check_version(s)
    rules, _ = release_rules(s)
    if rules.float_kv_mismatch and kv.name in ("float16", "bfloat16") and str(s.kv_dtype).strip().lower() != "auto" and kv.name != mdt:
        allowed = f"`auto` or `{mdt}`" if mdt in ("float16", "bfloat16") else "`auto`"
        raise PlanError(
            f"{named('kv_dtype')} {kv.name} with model dtype {mdt}: vLLM {rules.label} refuses it: "
            f'kv_cache_dtype="{kv.name}" is incompatible with dtype="{mdt}". Please set `--kv-cache-dtype` to {allowed}.'
        )
    state, _ = mamba_fields(model, s, str(s.vllm_version).strip())
    return CacheSettings(
        kv_dtype=kv,
        draft_kv_dtype=draft_kv_dtype(model, mdt, kv),
        block_size=block_size,
        mamba_dtype_bytes=MODEL_DTYPES[mdt],
        mamba_ssm_dtype_bytes=MODEL_DTYPES[ssm_state_dtype(model, mdt, parse_release(str(s.vllm_version)))],
        **state,
    )


def draft_kv_dtype(model: ModelSpec, mdt: str, target: KVDtype) -> KVDtype | None:
    """The drafter's own KV dtype (speculative config 'kv_cache_dtype'; 'auto': the model dtype, which the draft
    config takes from the target's), or None when its layers store what the target's store."""
    if not model.draft_kv_dtype:
        return None
    own = resolve_kv_dtype(model.draft_kv_dtype, model, mdt, label=f"{named('speculative_config')} 'kv_cache_dtype':")
    same = (own.bytes, own.scale_bytes_per_head, own.mla_token_bytes) == (target.bytes, target.scale_bytes_per_head, target.mla_token_bytes)
    return None if same else own




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
    pool: Any = None  # kvcalc.core.pool.PoolReport (SGLang: core.sglang_pool.SglangPool) when a GPU, memory or pool is given
    notes: tuple[str, ...] = ()
    checkpoint: dict | None = None
    engine: str = "vllm"
    sglang_version: str | None = None

    @property
    def rules(self) -> str:
        """Which engine and release the figures follow: 'vLLM 0.33', 'SGLang 0.5.23'."""
        return f"SGLang {self.sglang_version}" if self.engine == "sglang" else f"vLLM {self.vllm_version}"


def check_flags(s: Settings) -> None:
    """Every flag checked up front by its kind, whether or not it is used (a pool may not be
    computed: --gpu-memory-utilization 1.5 without --gpu is still wrong)."""
    from kvcalc.app.settings import INT_LIST, NONNEG, POSITIVE, SIZE, TABLE, UTIL
    from kvcalc.core.units import parse_size

    for name, f in TABLE.items():
        v = getattr(s, name)
        if v is None:
            continue
        if f.kind == POSITIVE:
            _positive(v, named(name))
        elif f.kind == NONNEG:
            _nonneg(v, named(name))
        elif f.kind == UTIL and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1):
            raise PlanError(f"{named(name)} must be in (0, 1], got {v!r}")
        elif f.kind == SIZE:
            for part in str(v).split(","):  # --kv-cache-memory: one figure per PP stage
                parse_size(part.strip() if isinstance(v, str) else v, named(name))
        elif f.kind == INT_LIST:
            parse_int_list(v, named(name))
    if s.gpu is not None:
        from kvcalc.core.gpus import find_gpu, is_auto

        if not is_auto(s.gpu):
            find_gpu(s.gpu)
    if s.language_model_only or s.limit_mm_per_prompt is not None:
        from kvcalc.app.mm_encoder import modality_limit

        modality_limit(s, "image")  # the JSON, and --language-model-only's release
    if s.usage_context is not None:
        from kvcalc.core.engine import USAGE_CONTEXTS

        if str(s.usage_context).strip().lower() not in USAGE_CONTEXTS:
            raise PlanError(f"{named('usage_context')} {s.usage_context!r} is not known; valid: {', '.join(USAGE_CONTEXTS)}")
    if any(v is not None for v in (s.sampler, s.compile_cache, s.quantization, s.nvidia_driver, s.speculative_config)):
        from kvcalc.app.budget_gpu import check_budget_words

        check_budget_words(s)
    check_version(s)


def too_long(r: SizeResult) -> str | None:
    """Why vLLM would reject a request of the traffic: longer than max_model_len."""
    longest = r.footprint.traffic.longest
    if longest <= r.max_model_len:
        return None
    limit = (f"{named('max_model_len')} {r.max_model_len}" if r.settings.max_model_len is not None
             else f"{r.model.name}'s maximum length {r.max_model_len} (from its config)")
    return f"a request of {longest} tokens is longer than {limit}: vLLM rejects it (raise the limit or shorten the request)"


_INERT_FLAGS = tuple((n, TABLE[n].flag) for n in INERT)
_inert_values = attrgetter(*INERT)
_UNSET = frozenset({id(None), id(False)})
# SGLang's own settings: with the vLLM engine, a note says they are ignored
_SGLANG_ONLY = ("mem_fraction_static", "max_total_tokens", "max_running_requests", "chunked_prefill_size", "free_before_weights")
_sglang_only = attrgetter(*_SGLANG_ONLY)


SGLANG_SPECULATIVE_NOTE = (
    "SGLang's drafter (its own KV pool, weights and graphs) is not modelled: the pool is overstated"
)


def flag_notes(s: Settings) -> list[str]:
    """One note for the vLLM serve flags given that change nothing here; --max-num-seqs kept; one for
    --speculative-config with SGLang, whose drafter kvcalc does not model."""
    sglang = str(s.engine).strip().lower() == "sglang"
    notes = [f"--speculative-config {s.speculative_config}: {SGLANG_SPECULATIVE_NOTE}"] if s.speculative_config and sglang else []
    if set(map(id, _inert_values(s))) <= _UNSET:  # none given (each None, or False for a switch)
        return notes
    given = [flag for n, flag in _INERT_FLAGS if getattr(s, n) is not None and getattr(s, n) is not False]
    if given:
        notes.append(f"{', '.join(given)}: vLLM serve {'flags' if len(given) > 1 else 'flag'} accepted so a command "
                     "line pastes; they change nothing in kvcalc's figures")
    return notes


def check_settings(model: ModelSpec, s: Settings) -> None:
    """The checks that do not depend on the parallel plan (``fit`` runs them before its search,
    so a wrong flag is one error, not a list of rejected plans)."""
    check_bounds(s)
    check_flags(s)
    max_model_len(model, s)
    cache_settings(model, s, block_size=default_block_size(model, s))


def evaluate(model: ModelSpec, s: Settings, *, checkpoint: dict | None = None) -> SizeResult:
    # before anything is built from them, every size is bounded (kvcalc.app.settings): the settings
    # besides the traffic when their setup is first derived (_derive), the traffic's when its
    # requests are first listed (_traffic); a sweep checks each set of values once
    result = _evaluate(model, s, checkpoint)
    over = too_long(result)
    if over:  # the warning first, then the notes (the flag notes last)
        result = replace(result, notes=(f"warning: {KvcalcError(over)}", *result.notes))
    return result


def engine_model(model: ModelSpec, s: Settings) -> ModelSpec:
    """The model as the engine holds it under ``s``: with vLLM, --speculative-config's drafter layers (its KV, state
    pages and weights; kvcalc.app.speculation). Every path from settings to figures goes through it."""
    if s.speculative_config is None or str(s.engine).strip().lower() != "vllm":
        return model
    from kvcalc.app.speculation import apply

    return apply(model, s, check_version(s))[0]


def _evaluate(model: ModelSpec, s: Settings, checkpoint: dict | None) -> SizeResult:
    """The result, its notes ending with the flag notes (``flag_notes``)."""
    if s.encoder_tokens is not None:
        from kvcalc.sources.config import with_encoder_tokens

        check_bounds(s)  # before the model is rebuilt with it

        if not model.encoder_decoder:
            raise PlanError(f"{named('encoder_tokens')} applies to encoder-decoder models; {model.name} is decoder-only")
        model = with_encoder_tokens(model, _positive(s.encoder_tokens, named("encoder_tokens")))
    model = engine_model(model, s)
    setup = _setup(model, s)
    layout = setup.layout
    if layout is None:
        layout = setup.layout = stage_layout(model, setup.plan, setup.cache)
    fp = footprint(model, setup.plan, setup.cache, traffic(model, s), layout)
    if setup.engine == "sglang":
        result = _evaluate_sglang(model, s, setup.plan, setup.cache, setup.max_model_len, setup.version, fp,
                                  [*model.notes, *setup.notes], checkpoint)
        flags = flag_notes(s)
        return replace(result, notes=(*result.notes, *flags)) if flags else result
    # the pool and the notes do not depend on the traffic: made once per setup and checkpoint
    facts = (checkpoint.get("bytes"), checkpoint.get("source", _NO_SOURCE)) if checkpoint else None
    made = setup.pools.get(facts)
    if made is None:
        made = setup.pools[facts] = _pool_and_notes(model, s, setup, checkpoint)
    pool, notes = made
    return SizeResult(model, s, fp, setup.max_model_len, setup.version, pool, notes, checkpoint)


def _pool_and_notes(model: ModelSpec, s: Settings, setup: _Setup, checkpoint: dict | None) -> tuple[Any, tuple[str, ...]]:
    """vLLM's pool (None without a pool setting, or for a model vLLM does not serve) and the
    result's notes: the model's, the setup's, the ignored SGLang settings', the pool's, the flags'."""
    notes = [*model.notes, *setup.notes]
    pool = None
    if s.enable_dp_attention or _sglang_only(s).count(None) != len(_SGLANG_ONLY):
        from kvcalc.app.sglang_budget import ignored_notes

        notes.extend(ignored_notes(s, "vllm"))
    if s.has_pool:
        if not model.vllm_supported:
            notes.append(f"vLLM does not serve {model.model_type}: no pool figures")
        else:
            from kvcalc.app.budget import budget_inputs
            from kvcalc.core.pool import pool_report

            inputs = budget_inputs(model, s, setup.plan, setup.cache, setup.max_model_len, setup.version, checkpoint,
                                   setup.rules)
            pool = pool_report(model, setup.plan, setup.cache, inputs)
            notes.extend(n for n in pool.notes if n not in notes)
            state_note = mamba_fields(model, s, setup.version)[1]
            if state_note:
                notes.append(state_note)
    return pool, (*notes, *flag_notes(s))


def _evaluate_sglang(
    model: ModelSpec, s: Settings, p: ParallelPlan, cache: CacheSettings, mml: int, version: str, fp: Footprint,
    notes: list[str], checkpoint: dict | None,
) -> SizeResult:
    """The same result with SGLang's pool (kvcalc.core.sglang_pool) in place of vLLM's."""
    from kvcalc.app.sglang_budget import ignored_notes, sglang_report
    from kvcalc.core.sglang import rules_for

    sg_version = str(s.sglang_version).strip()
    notes.extend(ignored_notes(s, "sglang"))
    pool = None
    if s.has_pool:
        pool = sglang_report(model, s, p, cache, mml, checkpoint)
        notes.extend(n for n in pool.notes if n not in notes)
    else:
        rules_for(str(s.sglang_version))  # refuse an unknown release even without a pool
    return SizeResult(  # type: ignore[call-arg]  # a kvcalc.core.record class: mypy sees no __init__ fields
        model, s, fp, mml, version, pool, tuple(notes), checkpoint, engine="sglang", sglang_version=sg_version
    )


_TRAFFIC = frozenset(TRAFFIC_SETTINGS)
_NO_SOURCE = object()  # a checkpoint without "source" (budget_inputs then says "safetensors")


class _Setup:
    """What ``evaluate`` derives from a model and every setting but the traffic, and the
    pool for each checkpoint (budget_inputs reads its "bytes" and "source" only)."""

    __slots__ = ("version", "rules", "max_model_len", "cache", "plan", "notes", "engine", "pools", "layout")

    def __init__(
        self, version: str, rules: tuple[RuleLine, str], mml: int, cache: CacheSettings, plan: ParallelPlan,
        notes: tuple[str, ...], engine: str,
    ) -> None:
        self.version, self.rules, self.max_model_len, self.cache, self.plan, self.notes = version, rules, mml, cache, plan, notes
        self.engine = engine
        self.pools: dict[Any, Any] = {}
        self.layout: Any = None  # kvcalc.core.footprint.stage_layout, made on first use


_setups: Memo[_Setup] = Memo(2048)
_knobs: list[Any] = []  # attrgetter of every setting but the traffic, made on first use
_KNOBS = "__knobs__"  # where a Settings keeps its non-traffic values once read (never compared or copied)


def _knob_values(s: Settings) -> tuple:
    """Every setting but the traffic, in table order (kept on the immutable settings once read,
    as a record keeps its hash)."""
    knobs = s.__dict__.get(_KNOBS)
    if knobs is None:
        if not _knobs:
            _knobs.append(attrgetter(*(n for n in Settings.names() if n not in _TRAFFIC)))
        knobs = s.__dict__[_KNOBS] = _knobs[0](s)
    return knobs  # type: ignore[no-any-return]


def _setup(model: ModelSpec, s: Settings) -> _Setup:
    """Cached: a sweep over the traffic derives the setup (and the pool) once; errors are
    raised again on every call. The model's ``arch`` (outside its ==) counts by identity:
    the key holds the model, so that id stays unique while the entry lives."""
    return _setups.get((model, id(model.arch), _knob_values(s)), _derive, model, s)


def _derive(model: ModelSpec, s: Settings) -> _Setup:
    check_bounds(s)  # first: a setup is cached only for values within their bounds
    check_flags(s)
    version = check_version(s)
    engine = "vllm"
    if s.engine != "vllm":
        from kvcalc.app.sglang_budget import engine_of, kv_dtype_name

        engine = engine_of(s)
        if engine == "sglang":
            kv_dtype_name(s)
    rules = release_rules(s)
    mml = max_model_len(model, s)
    bs = default_block_size(model, s) if engine == "vllm" or s.block_size is not None else 1  # SGLang: page_size 1
    cache = cache_settings(model, s, block_size=bs)
    p = plan(s)
    cache_notes: list[str] = []
    if "mamba" in model.kinds:
        from kvcalc.core.footprint import check_tp
        from kvcalc.core.pool import engine_cache

        check_tp(model, p.tp)
        cache, _, cache_notes = engine_cache(model, p, cache, rules[0])
    return _Setup(version, rules, mml, cache, p, tuple(cache_notes), engine)


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
