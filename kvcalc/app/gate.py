"""Capacity gates: evaluate every promise of every deployment of a gate file.

``evaluate_gate`` checks every promise of every deployment (``kvcalc.app.gate_schema`` loads
and validates the file), failures included, and for each failure searches the nearest setting
that would pass. An ``Outcome`` carries the figures (required, actual, margin, suggestions, the
evaluation they come from, the reason of an error), never words: ``kvcalc.render.gate`` writes
the messages and every output, ``kvcalc.cli.gate`` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvcalc.app.gate_schema import PROMISES, Deployment, GateFile, Problem
from kvcalc.app.service import Settings
from kvcalc.errors import EXIT_GATE_FAILED, EXIT_OK, EXIT_USAGE, KEY, KvcalcError

TP_SEARCH_LIMIT = 64  # the largest tensor-parallel size tried when looking for a passing setting


@dataclass(frozen=True)
class Suggestion:
    key: str  # the setting changed
    value: Any  # the value that passes
    actual: Any  # the promise's figure at that value


@dataclass(frozen=True)
class Outcome:
    """One promise of one deployment."""

    deployment: str
    model: str
    promise: str
    required: Any
    actual: Any
    margin: Any
    status: str  # pass | fail | error
    reason: str = ""  # error: why the promise could not be evaluated
    suggestions: tuple[Suggestion, ...] = ()
    line: int | None = None
    max_model_len: int | None = None
    result: Any = field(default=None, compare=False, repr=False)  # the SizeResult the figures come from

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass(frozen=True)
class GateReport:
    path: str
    outcomes: tuple[Outcome, ...]
    problems: tuple[Problem, ...]  # deployments that could not be evaluated (exit 2)
    deployments: int = 0

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def exit_code(self) -> int:
        if self.problems:
            return EXIT_USAGE
        return EXIT_GATE_FAILED if self.count("fail") else EXIT_OK


# --------------------------------------------------------------------------- evaluation


class _Probe:
    """Evaluations of one deployment under changed settings, memoized."""

    def __init__(self, resolved: Any, settings: Settings) -> None:
        self.resolved = resolved
        self.settings = settings
        self.cache: dict[tuple, Any] = {}

    def run(self, **changes: Any) -> Any:
        from kvcalc.app.service import evaluate

        key = tuple(sorted(changes.items()))
        if key not in self.cache:
            try:
                # no promise depends on the number of DP replicas (each is measured per replica or
                # per rank): one replica is evaluated, not tp x pp x dp ranks per probe
                self.cache[key] = evaluate(
                    self.resolved.spec, self.settings.with_(dp=1, **changes), checkpoint=self.resolved.checkpoint
                )
            except KvcalcError:
                self.cache[key] = None
        return self.cache[key]


def headroom(block_rounded_bytes_per_rank: int, num_blocks: int, bytes_per_block: int) -> float | None:
    """1 - (KV the traffic holds on the busiest rank) / (num_blocks x bytes_per_block).

    The pool's bytes count every block vLLM allocates, its null block included (as vLLM's
    own concurrency figure does). Example: 1000 blocks of 1 MiB, traffic holding 250 MiB
    per rank -> 1 - 250/1000 = 0.75. None when the pool is empty."""
    capacity = num_blocks * bytes_per_block
    if capacity <= 0:
        return None
    return 1 - block_rounded_bytes_per_rank / capacity


def measure(key: str, result: Any) -> Any:
    """The figure a promise compares, from one SizeResult (None where it has no pool)."""
    fp = result.footprint
    if key == "max_kv_bytes_per_rank":
        return fp.block_rounded_bytes_per_rank
    if key == "max_bytes_per_token_per_rank":
        return fp.bytes_per_token_per_rank
    pool = result.pool
    if pool is None:
        return None
    if key == "min_concurrency":
        return float(pool.max_concurrency)
    if key == "min_max_tokens":
        return int(pool.pool_tokens)
    if key == "min_kv_cache_size_tokens":
        return int(pool.kv_cache_size_tokens)
    if key == "fits_max_model_len":
        return bool(pool.fits)
    if key == "min_headroom":
        return headroom(fp.block_rounded_bytes_per_rank, int(pool.num_blocks), int(pool.bytes_per_block))
    raise KeyError(key)  # pragma: no cover - PROMISES lists every key


def passes(key: str, required: Any, actual: Any) -> bool:
    if actual is None:
        return False
    kind = PROMISES[key].kind
    if kind == "min":
        return actual >= required
    if kind == "max":
        return actual <= required
    return actual is True


def margin(key: str, required: Any, actual: Any, result: Any) -> Any:
    """How far the figure is from the limit: positive = room to spare, negative = short by."""
    if actual is None:
        return None
    kind = PROMISES[key].kind
    if kind == "min":
        return actual - required
    if kind == "max":
        return required - actual
    # fits_max_model_len: tokens between max_model_len and the longest request that fits
    # (vLLM's estimated maximum model length, searched up to the model's own maximum)
    pool = result.pool
    if pool is None or pool.estimated_max_model_len is None:
        return None
    return int(pool.estimated_max_model_len) - int(result.max_model_len)


def evaluate_gate(gate: GateFile, *, resolver: Any = None) -> GateReport:
    """Every promise of every deployment, failures included; unloadable models are problems."""
    if resolver is None:
        from kvcalc.sources.resolve import resolve as resolver
    outcomes: list[Outcome] = []
    problems: list[Problem] = []
    models: dict[tuple, Any] = {}
    for d in gate.deployments:
        key = (d.model, d.revision)
        if key not in models:
            models[key] = _resolve(resolver, d)
        resolved = models[key]
        if isinstance(resolved, KvcalcError):
            problems.append(
                Problem(
                    f"deployment {d.name!r}: model {d.model!r} cannot be loaded: {resolved.message}",
                    d.key_lines.get("model", d.line),
                    deployment=d.name,
                    key="model",
                )
            )
            outcomes += [_error_outcome(d, k, v, "model cannot be loaded") for k, v in d.promises]
            continue
        _evaluate_deployment(d, resolved, outcomes, problems)
    return GateReport(gate.path, tuple(outcomes), tuple(problems), len(gate.deployments))


def _resolve(resolver: Any, d: Deployment) -> Any:
    """The resolved model, or the one-line KvcalcError saying why it cannot be loaded."""
    try:
        return resolver(d.model, revision=d.revision)
    except Exception as exc:  # noqa: BLE001 - one deployment's model never aborts the others (docs/gate.md)
        msg = exc.message if isinstance(exc, KvcalcError) else f"{type(exc).__name__}: {exc}"
        return KvcalcError(" ".join(str(msg).split())[:500])


def _evaluate_deployment(d: Deployment, resolved: Any, outcomes: list[Outcome], problems: list[Problem]) -> None:
    """The outcome of each promise of one deployment; what stops it being evaluated is a problem."""
    from kvcalc.app.service import evaluate, too_long

    probe = _Probe(resolved, d.settings)
    try:
        result = evaluate(resolved.spec, d.settings, checkpoint=resolved.checkpoint)
    except KvcalcError as exc:
        problems.append(Problem(f"deployment {d.name!r}: {exc.text(KEY)}", d.line, deployment=d.name))
        outcomes += [_error_outcome(d, k, v, exc.text(KEY)) for k, v in d.promises]
        return
    over = too_long(result)
    if over:  # a request vLLM would reject: an error in a gate, not a figure
        why = KvcalcError(over).text(KEY)
        problems.append(Problem(f"deployment {d.name!r}: {why}", d.line, deployment=d.name))
        outcomes += [_error_outcome(d, k, v, why) for k, v in d.promises]
        return
    probe.cache[()] = result
    for k, required in d.promises:
        line = d.key_lines.get(k, d.line)
        if PROMISES[k].needs_pool and result.pool is None:
            why = "; ".join(n for n in result.notes if "pool" in n) or "no KV pool was computed"
            problems.append(Problem(f"deployment {d.name!r}: {k}: {why}", line, deployment=d.name, key=k))
            outcomes.append(_error_outcome(d, k, required, why))
            continue
        actual = measure(k, result)
        ok = passes(k, required, actual)
        outcomes.append(
            Outcome(
                deployment=d.name,
                model=d.model,
                promise=k,
                required=required,
                actual=actual,
                margin=margin(k, required, actual, result),
                status="pass" if ok else "fail",
                suggestions=() if ok else tuple(nearest(k, required, probe, result)),
                line=line,
                max_model_len=int(result.max_model_len),
                result=result,
            )
        )


def _error_outcome(d: Deployment, key: str, required: Any, why: str) -> Outcome:
    return Outcome(d.name, d.model, key, required, None, None, "error", why, (), d.key_lines.get(key, d.line))


# --------------------------------------------------------------------------- the nearest passing setting


def nearest(key: str, required: Any, probe: _Probe, result: Any) -> list[Suggestion]:
    """Settings one step away that would pass: the smallest larger TP, the gpu_memory_utilization
    needed, the largest max_model_len (fits / concurrency), fp8 KV."""
    from kvcalc.core.footprint import check_tp

    out: list[Suggestion] = []
    s = probe.settings
    pool = result.pool

    def ok(r: Any) -> bool:
        return r is not None and passes(key, required, measure(key, r))

    def actual_of(r: Any) -> float:
        return float(measure(key, r) or 0)

    if key == "fits_max_model_len" and pool is not None:
        est = pool.estimated_max_model_len
        if est:
            out.append(Suggestion("max_model_len", int(est), True))
    elif key == "min_concurrency" and ok(probe.run(max_model_len=1)):
        # concurrency ~ 1 / max_model_len: start from that guess, then gallop and bisect
        L = int(result.max_model_len)
        guess = int(L * actual_of(result) / required) if required else L - 1
        best = largest_passing(lambda n: ok(probe.run(max_model_len=n)), 1, L - 1, guess, result.footprint.cache.block_size)
        if best is not None:
            out.append(Suggestion("max_model_len", best, measure(key, probe.run(max_model_len=best))))

    for tp in range(s.tp + 1, TP_SEARCH_LIMIT + 1):
        try:
            check_tp(probe.resolved.spec, tp)  # vLLM's divisibility rules, before a full evaluation
        except KvcalcError:
            continue
        r = probe.run(tp=tp)
        if ok(r):
            out.append(Suggestion("tp", tp, measure(key, r)))
            break

    util_applies = (
        PROMISES[key].needs_pool and pool is not None and s.kv_cache_memory is None and s.num_gpu_blocks_override is None
        and getattr(pool, "engine", "vllm") == "vllm"  # SGLang's knob is --mem-fraction-static, not the utilization
    )
    if util_applies:
        current = float(pool.inputs.gpu_memory_utilization or s.gpu_memory_utilization or 0.92)
        lo, hi = int(current * 1000) + 1, 1000
        top = probe.run(gpu_memory_utilization=1.0)
        if lo <= hi and ok(top):
            found = (1000, top)
            while lo <= hi:  # more memory never shrinks the pool: search the smallest passing value
                mid = (lo + hi) // 2
                r = probe.run(gpu_memory_utilization=mid / 1000)
                if ok(r):
                    found, hi = (mid, r), mid - 1
                else:
                    lo = mid + 1
            out.append(Suggestion("gpu_memory_utilization", found[0] / 1000, measure(key, found[1])))

    kv = result.footprint.cache.kv_dtype
    if kv.bytes > 1 and not s.kv_dtype.lower().startswith(("fp8", "int8")):
        r = probe.run(kv_dtype="fp8")
        if ok(r):
            out.append(Suggestion("kv_dtype", "fp8", measure(key, r)))
    return out


def largest_passing(ok: Any, lo: int, hi: int, guess: int, step: int) -> int | None:
    """Largest n in [lo, hi] with ok(n), for ok true up to some n* and false above it.

    Gallops from ``guess`` by ``step``, doubling, until the answer is bracketed, then bisects:
    a few evaluations when the guess is close (concurrency ~ 1 / max_model_len makes it so)."""
    guess = min(max(guess, lo), hi)
    step = max(step, 1)
    if ok(guess):
        good, bad = guess, hi + 1  # bad: the smallest failing value known (hi + 1: none yet)
        while bad == hi + 1:
            if good == hi:
                return good
            x = min(good + step, hi)
            if ok(x):
                good = x
            else:
                bad = x
            step *= 2
    else:
        good, bad = lo - 1, guess  # good: the largest passing value known (lo - 1: none yet)
        while good == lo - 1:
            if bad == lo:
                return None
            x = max(bad - step, lo)
            if ok(x):
                good = x
            else:
                bad = x
            step *= 2
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


