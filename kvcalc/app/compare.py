"""`kvcalc compare`: the rows of one comparison (no printing, no formatting).

A comparison is a cartesian product: models (as given) x settings combinations (one
value of every list flag) x attention variants (hypothetical N_kv). Every row is one
``kvcalc.app.service.evaluate`` call; a combination the model cannot take (TP that does not
divide its heads, an MLA model asked for MHA) stays as a row holding the reason.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

from kvcalc.app.service import SizeResult, evaluate
from kvcalc.app.settings import MAX_COMPARE_ROWS, SWEEPS, Settings
from kvcalc.core.model import ModelSpec
from kvcalc.core.record import field, record, replace
from kvcalc.errors import KvcalcError

# settings that take a comma-separated list, in the order the product nests them
SWEEP_FLAGS = SWEEPS
_LABEL_NAMES = {k: flag.lstrip("-") for k, (flag, _) in SWEEP_FLAGS.items()}  # a row label's names: tp=2

# layer kinds whose KV heads a variant changes (self-attention); cross-attention, MLA
# and state layers are left as they are
SELF_ATTENTION_KINDS = ("full", "sliding", "chunked")

# --sort keys -> (direction, what) ; rows sort best first: fewer bytes, more capacity
SORT_KEYS: dict[str, str] = {
    "model": "model name, A to Z",
    "bytes_per_token": "bytes per token (whole model), smallest first",
    "bytes_per_token_per_rank": "bytes per token on the largest rank, smallest first",
    "effective_bytes": "effective KV for the traffic, smallest first",
    "block_rounded_bytes": "block-rounded KV for the traffic, smallest first",
    "pool_tokens": "tokens the KV pool holds, largest first",
    "max_concurrency": "max concurrency for requests of max_model_len tokens, largest first",
}
_DESCENDING = ("pool_tokens", "max_concurrency")

_ATTENTION_RE = re.compile(r"^(mha|gqa|mqa)(?::(\d+))?$")


def parse_list(text: str | int | None, flag: str, kind: type = int) -> tuple[Any, ...] | None:
    """'1,2,4' -> (1, 2, 4); None stays None. Duplicates are dropped, order is kept."""
    if text is None:
        return None
    out: list[Any] = []
    for part in str(text).split(","):
        item = part.strip()
        if not item:
            raise KvcalcError(f"{flag} has an empty entry in {text!r}; give comma-separated values like 1,2,4")
        if kind is int:
            try:
                value: Any = int(item)
            except ValueError:
                raise KvcalcError(
                    f"{flag} takes integers or a comma-separated list of them like 1,2,4, got {text!r}"
                ) from None
        elif kind is float:
            try:
                value = float(item)
            except ValueError:
                raise KvcalcError(f"{flag} takes numbers or a comma-separated list of them like 0.8,0.9, got {text!r}") from None
        else:
            value = item
        if value not in out:
            out.append(value)
    return tuple(out)


def parse_attention(text: str | None) -> tuple[str, ...] | None:
    """'mha,gqa,mqa,gqa:4' -> ('mha', 'gqa', 'mqa', 'gqa:4'), checked for syntax only."""
    items = parse_list(text, "--attention", str)
    if items is None:
        return None
    out = []
    for item in items:
        key = item.lower()
        m = _ATTENTION_RE.match(key)
        if not m or (m.group(2) is not None and m.group(1) != "gqa"):
            raise KvcalcError(f"--attention {item!r} is not known; valid: mha, gqa, gqa:N (N KV heads), mqa")
        if m.group(2) is not None and int(m.group(2)) < 1:
            raise KvcalcError(f"--attention {item!r}: the KV head count must be a positive integer")
        if key not in out:
            out.append(key)
    return tuple(out)


@record
class Variant:
    """An attention variant of one model: the same model with N_kv KV heads per layer."""

    key: str  # as given: mha | gqa | gqa:N | mqa
    family: str  # MHA | GQA | MQA
    num_query_heads: int
    num_kv_heads: int
    hypothetical: bool  # False when the model already has this many KV heads in every layer

    @property
    def label(self) -> str:
        return f"{self.family} (hypothetical)" if self.hypothetical else f"{self.family} (the model's own)"

    @property
    def query_heads_per_kv_head(self) -> int:
        return self.num_query_heads // self.num_kv_heads


def variant_of(model: ModelSpec, key: str) -> Variant:
    """Which N_kv a variant key means for this model; KvcalcError when it does not apply."""
    if model.mla:
        raise KvcalcError(
            f"{model.name} uses MLA (one compressed latent per token, no K/V heads): MHA/GQA/MQA variants do not apply"
        )
    own = sorted({x.num_kv_heads for x in model.layers if x.kind in SELF_ATTENTION_KINDS})
    if not own:
        raise KvcalcError(f"{model.name} has no self-attention layers with K/V heads: MHA/GQA/MQA variants do not apply")
    n_q = model.num_attention_heads
    family, _, count = key.partition(":")
    if family == "mha":
        n_kv = n_q
    elif family == "mqa":
        n_kv = 1
    elif count:
        n_kv = int(count)
        if not 1 < n_kv < n_q or n_q % n_kv:
            valid = [d for d in range(2, n_q) if n_q % d == 0]
            raise KvcalcError(
                f"--attention {key}: GQA needs a KV head count that divides the {n_q} query heads and lies between "
                f"1 (MQA) and {n_q} (MHA); valid: {', '.join(f'gqa:{d}' for d in valid) or 'none'}"
            )
    else:
        if len(own) != 1 or not 1 < own[0] < n_q:
            raise KvcalcError(
                f"--attention gqa: {model.name} is {model.attention.split(' ')[0]}, not GQA; "
                f"give gqa:N with N a divisor of its {n_q} query heads"
            )
        n_kv = own[0]
    return Variant(key, family.upper(), n_q, n_kv, hypothetical=own != [n_kv])


def with_kv_heads(model: ModelSpec, num_kv_heads: int) -> ModelSpec:
    """The same model with every self-attention layer holding ``num_kv_heads`` KV heads;
    nothing else changes (layers, head_dim, dtype, windows, weights estimate)."""
    layers = tuple(
        replace(x, num_kv_heads=num_kv_heads) if x.kind in SELF_ATTENTION_KINDS else x for x in model.layers
    )
    return replace(model, layers=layers, num_kv_heads=num_kv_heads)


@record
class ModelInput:
    """A model as the user named it, resolved."""

    given: str
    spec: ModelSpec
    checkpoint: dict | None = None


@record(frozen=False)
class Row:
    model: str  # the model's name
    given: str  # as typed on the command line
    sweep: dict[str, Any]  # the value of every list flag for this row
    variant_key: str | None = None  # --attention entry as given, None without --attention
    variant: Variant | None = None  # None when the variant does not apply (see error)
    result: SizeResult | None = None
    error: str | None = None
    group: int = 0  # rows of one model and one settings combination share a group
    index: int = 0  # position before any --sort
    payload_part: int | None = None  # bytes per token / gcd over the group (variants only)
    payload_vs_mha: float | None = None  # bytes per token / MHA's bytes per token (variants only)
    payload_ratio: str | None = None  # the group's parts joined, e.g. 16:8:1

    def label(self, varying: tuple[str, ...]) -> str:
        parts = [self.given]
        if self.variant is not None:
            parts.append(self.variant.label)
        elif self.variant_key:
            parts.append(self.variant_key)
        sweep = self.sweep
        parts += [f"{_LABEL_NAMES[k]}={sweep[k]}" for k in varying]
        return " ".join(parts)

    @property
    def replicated(self) -> bool:
        return self.result is not None and any(x.replicated for x in self.result.footprint.ranks)

    def sort_value(self, key: str) -> Any:
        r = self.result
        if key == "model":
            return self.model.lower()
        if r is None:
            return None
        fp = r.footprint
        if key == "bytes_per_token":
            return fp.bytes_per_token
        if key == "bytes_per_token_per_rank":
            return fp.bytes_per_token_per_rank
        if key == "effective_bytes":
            return fp.logical.effective_bytes
        if key == "block_rounded_bytes":
            return fp.logical.block_rounded_bytes
        if r.pool is None:
            return None
        return getattr(r.pool, key, None)


@record(frozen=False)
class Comparison:
    rows: list[Row]
    sweeps: dict[str, tuple[Any, ...]]  # every list flag given, with its values
    varying: tuple[str, ...]  # list flags with more than one value
    attention: tuple[str, ...] | None
    sort: str | None = None
    models: list[str] = field(default_factory=list)

    @property
    def has_pool(self) -> bool:
        return any(r.result is not None and r.result.pool is not None for r in self.rows)


def check_sort(key: str | None) -> str | None:
    if key is None:
        return None
    k = key.strip().lower().replace("-", "_")
    if k not in SORT_KEYS:
        raise KvcalcError(f"--sort {key!r} is not known; valid: {', '.join(SORT_KEYS)}")
    return k


def compare(
    models: list[ModelInput],
    base: Settings,
    sweeps: dict[str, tuple[Any, ...] | None] | None = None,
    attention: tuple[str, ...] | None = None,
    sort: str | None = None,
) -> Comparison:
    """Every row of the comparison. ``sweeps`` maps Settings names to their values."""
    if not models:
        raise KvcalcError("give at least one MODEL to compare")
    given: dict[str, tuple[Any, ...]] = {k: v for k, v in (sweeps or {}).items() if v is not None}
    for k in given:
        if k not in SWEEP_FLAGS:  # pragma: no cover - the CLI only passes known names
            raise KvcalcError(f"{k} cannot be swept; list flags: {', '.join(f for f, _ in SWEEP_FLAGS.values())}")
    keys = [k for k in SWEEP_FLAGS if k in given]
    varying = tuple(k for k in keys if len(given[k]) > 1)
    count = len(models) * max(1, len(attention or ())) * math.prod(len(given[k]) for k in keys)
    if count > MAX_COMPARE_ROWS:  # checked before the product is built: every row is an evaluation
        raise KvcalcError(
            f"the comparison would have {count:,} rows ({' x '.join(str(len(given[k])) for k in keys) or '1'} "
            f"values per model); kvcalc compares at most {MAX_COMPARE_ROWS:,}: sweep fewer values"
        )
    combos = list(itertools.product(*(given[k] for k in keys)))
    sort = check_sort(sort)

    rows: list[Row] = []
    group = 0
    for m in models:
        variants: list[tuple[str, Variant | None, ModelSpec | None, str | None]] = []
        for key in attention or ():
            try:
                v = variant_of(m.spec, key)
                variants.append((key, v, with_kv_heads(m.spec, v.num_kv_heads) if v.hypothetical else m.spec, None))
            except KvcalcError as exc:
                variants.append((key, None, None, exc.message))
        if not attention:
            variants.append(("", None, m.spec, None))
        for combo in combos:
            sweep = dict(zip(keys, combo))
            settings = base.with_(**sweep)
            group_rows: list[Row] = []
            for key, variant, spec, err in variants:
                row = Row(m.spec.name, m.given, sweep, key or None, variant, group=group, index=len(rows) + len(group_rows))
                if err is not None or spec is None:
                    row.error = err
                else:
                    try:
                        row.result = evaluate(spec, settings, checkpoint=m.checkpoint)
                    except KvcalcError as exc:
                        row.error = exc.message
                group_rows.append(row)
            if attention:
                _payload_ratios(m.spec, group_rows)
            rows += group_rows
            group += 1

    if rows and all(r.error is not None for r in rows):
        first = rows[0]
        raise KvcalcError(f"no row of the comparison can be computed; {first.label(varying)}: {first.error}")
    if sort is not None:
        rows = _sorted(rows, sort)
    return Comparison(rows, given, varying, attention, sort, [m.given for m in models])


def _payload_ratios(model: ModelSpec, rows: list[Row]) -> None:
    """Each variant's payload against MHA's (same dtype, same layers: only N_kv differs),
    and the group's ratio in lowest terms: N_kv 16, 8, 1 -> 16:8:1."""
    from kvcalc.core.footprint import layer_spec

    ok = [(r, r.result) for r in rows if r.result is not None]
    if not ok:
        return
    cache = ok[0][1].footprint.cache
    mha = with_kv_heads(model, model.num_attention_heads)
    mha_bpt = sum(layer_spec(x, 1, cache).decoder_bytes_per_token for x in mha.layers)
    g = 0
    for _, res in ok:
        g = math.gcd(g, res.footprint.bytes_per_token)
    for r, res in ok:
        bpt = res.footprint.bytes_per_token
        r.payload_part = bpt // g if g else 0
        r.payload_vs_mha = bpt / mha_bpt if mha_bpt else None
    ratio = ":".join(str(r.payload_part) for r, _ in ok)
    for r, _ in ok:
        r.payload_ratio = ratio


def _sorted(rows: list[Row], key: str) -> list[Row]:
    """Stable sort, best first; rows without the figure (errors, no pool) go last."""
    have = [r for r in rows if r.sort_value(key) is not None]
    rest = [r for r in rows if r.sort_value(key) is None]
    have.sort(key=lambda r: r.sort_value(key), reverse=key in _DESCENDING)
    return have + rest


def shapes(row: Row) -> dict[str, Any] | None:
    """Logical Q and K/V shapes [B, T, N, D] of the row's traffic (docs/design.md section 3);
    T is None when the requests differ in length."""
    if row.result is None or row.variant is None:
        return None
    fp = row.result.footprint
    m = fp.model
    reqs = fp.traffic.requests
    b = len(reqs)
    t = reqs[0] if reqs and all(x == reqs[0] for x in reqs) else None
    n_kv = row.variant.num_kv_heads
    q = [b, t, m.num_attention_heads, m.head_dim]
    k = [b, t, n_kv, m.head_dim]
    v = [b, t, n_kv, m.head_dim_v or m.head_dim]
    return {"q_shape": q, "k_shape": k, "v_shape": v}
