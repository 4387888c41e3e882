"""`kvcalc compare`: the JSON contract (a list of `kvcalc size` objects, one per row, plus
``label``, ``sweep``, ``variant`` and ``error``) and the table people read."""

from __future__ import annotations

from typing import Any

from kvcalc.app.compare import SORT_KEYS, SWEEP_FLAGS, Comparison, Row, shapes
from kvcalc.app.service import SizeResult
from kvcalc.core.units import format_bytes
from kvcalc.render import Document, Table
from kvcalc.render.pool import pool_payload
from kvcalc.render.size import size_payload
from kvcalc.words import plural

CAPACITY_NOT_SPEED = (
    "a capacity ratio is not a speed ratio: the N_q query heads, the projections, communication and the kernel "
    "paths do not shrink in the same proportion as the KV payload"
)


def variant_payload(row: Row) -> dict[str, Any] | None:
    if row.variant_key is None:
        return None
    v = row.variant
    out: dict[str, Any] = {
        "key": row.variant_key,
        "family": v.family if v else row.variant_key.partition(":")[0].upper(),
        "label": v.label if v else None,
        "hypothetical": v.hypothetical if v else None,
        "num_query_heads": v.num_query_heads if v else None,
        "num_kv_heads": v.num_kv_heads if v else None,
        "query_heads_per_kv_head": v.query_heads_per_kv_head if v else None,
        "q_shape": None,
        "k_shape": None,
        "v_shape": None,
        "payload_part": row.payload_part,
        "payload_ratio": row.payload_ratio,
        "payload_vs_mha": row.payload_vs_mha,
    }
    sh = shapes(row)
    if sh:
        out.update(sh)
    return out


def row_payload(row: Row, varying: tuple[str, ...]) -> dict[str, Any]:
    if row.result is not None:
        out = size_payload(row.result)
    else:
        out = {"model": {"name": row.model}}
    out["label"] = row.label(varying)
    out["sweep"] = dict(row.sweep)
    out["variant"] = variant_payload(row)
    out["error"] = row.error
    return out


def compare_payload(c: Comparison) -> list[dict[str, Any]]:
    return [row_payload(r, c.varying) for r in c.rows]


def _shape(dims: list[Any]) -> str:
    return "[" + ",".join("T" if d is None else str(d) for d in dims) + "]"



def _short(r: Row) -> str:
    """MHA, GQA, GQA-4, MQA: the variant's name for the ratio line."""
    key = r.variant_key or ""
    fam, _, n = key.partition(":")
    return fam.upper() + (f"-{n}" if n else "")


def _rows_of_group(c: Comparison, group: int) -> list[Row]:
    return [r for r in c.rows if r.group == group]


def compare_document(c: Comparison, units: str = "iec") -> Document:
    rows = c.rows
    ok = [r for r in rows if r.result is not None]
    variants = c.attention is not None
    multi_model = len(c.models) > 1
    if variants and not multi_model:
        title = f"Attention variants of {c.models[0]}: only N_kv changes"
    elif multi_model:
        title = f"{len(c.models)} models side by side"
    else:
        title = f"Sweep of {c.models[0]}"
    doc = Document(title)
    doc.facts = _facts(c, ok, variants)
    doc.tables.append(_table(c, ok, variants, multi_model, units))
    doc.notes = _notes(c, variants)
    return doc


def _facts(c: Comparison, ok: list[Row], variants: bool) -> list[tuple[str, str]]:
    rows = c.rows
    doc = Document("")
    if c.varying:
        doc.facts.append(
            ("sweep", " x ".join(f"{SWEEP_FLAGS[k][0]} {', '.join(map(str, c.sweeps[k]))}" for k in c.varying)
             + f" ({len(rows)} rows)")
        )
    fixed = [k for k in c.sweeps if k not in c.varying]
    if fixed:
        doc.facts.append(("same for all rows", ", ".join(f"{SWEEP_FLAGS[k][0]} {c.sweeps[k][0]}" for k in fixed)))
    if ok:
        first = _res(ok[0])
        if not {"tokens", "batch"} & set(c.varying):
            doc.facts.append(("traffic", first.footprint.traffic.description))
        if "kv_dtype" not in c.varying:
            kinds = sorted({_res(r).footprint.cache.kv_dtype.name for r in ok})
            doc.facts.append(("kv cache dtype", ", ".join(kinds)))
        doc.facts.append(("rules", ", ".join(dict.fromkeys(r.result.rules for r in ok if r.result is not None))))
    if variants:
        groups = sorted({r.group for r in rows})
        if len(groups) == 1:
            grp = sorted((r for r in _rows_of_group(c, groups[0]) if r.payload_part is not None), key=lambda r: r.index)
            if len(grp) > 1:
                doc.facts.append(
                    ("payload ratio",
                     f"{':'.join(_short(r) for r in grp)} = {grp[0].payload_ratio} "
                     f"(N_kv {', '.join(str(r.variant.num_kv_heads) for r in grp if r.variant is not None)})")
                )
    doc.facts.append(("order", f"sorted by {SORT_KEYS[c.sort]}" if c.sort else "as given"))
    return doc.facts


def _res(r: Row) -> SizeResult:
    """The result of a row known to have one (the rows that evaluated)."""
    assert r.result is not None
    return r.result


def _table(c: Comparison, ok: list[Row], variants: bool, multi_model: bool, units: str) -> Table:
    rows = c.rows
    any_parallel = any(_res(r).footprint.plan.ranks_per_replica > 1 for r in ok)
    cols: list[str] = []
    if multi_model or not variants:
        cols.append("model")
    if variants:
        cols += ["variant"]
    cols += [SWEEP_FLAGS[k][0].lstrip("-") for k in c.varying]
    if variants:
        cols += ["N_q", "N_kv", "Q shape", "K/V shape", "Q per KV"]
    else:
        cols.append("attention")
    if any_parallel:
        cols.append("KV heads/rank")
    cols.append("bytes/token")
    if any_parallel:
        cols.append("bytes/token/rank")
    if variants:
        cols.append("ratio")
    cols += ["effective KV", "block-rounded KV"]
    if c.has_pool:
        cols += ["pool tokens", "max concurrency"]
    if any(_note(r) for r in rows):
        cols.append("note")

    ids = ("model", "variant", *(SWEEP_FLAGS[k][0].lstrip("-") for k in c.varying))
    table = Table("", cols, key=max(1, sum(1 for col in cols if col in ids)))
    table.align = [
        "r" if col in ("N_q", "N_kv", "Q per KV", "bytes/token", "bytes/token/rank", "ratio",
                       "effective KV", "block-rounded KV", "pool tokens", "max concurrency", "tp", "pp", "dp",
                       "block-size", "tokens", "batch", "max-model-len") else "l"
        for col in cols
    ]
    for r in rows:
        table.rows.append([_cell(col, r, c, units) for col in cols])
    return table


def _notes(c: Comparison, variants: bool) -> list[str]:
    rows = c.rows
    notes: list[str] = []
    if variants:
        if any(r.variant is not None and r.variant.hypothetical for r in rows):
            notes.append(
                "hypothetical variants change only N_kv, the K/V heads of every self-attention layer; layers, "
                "head_dim, dtypes and the weights estimate stay the real model's"
            )
        notes.append(
            "Q keeps N_q heads: each KV head is broadcast to N_q/N_kv query heads at compute time, the cache "
            "holds N_kv heads, not N_q copies"
        )
        notes.append(CAPACITY_NOT_SPEED)
    replicated = [r for r in rows if r.replicated]
    if replicated:
        r0 = _res(replicated[0]).footprint
        notes.append(
            f"rows marked 'replicated': TP is larger than the KV heads (e.g. TP {r0.plan.tp} > {r0.model.num_kv_heads}), "
            "so each rank holds a whole replicated KV head and the per-rank bytes stop shrinking"
        )
    bad = [r for r in rows if r.error is not None]
    if bad:
        notes.append(f"{plural(len(bad), 'row')} cannot be computed; the reason is in their note (exit status stays 0)")
    if c.has_pool:
        notes.append(
            "pool tokens: blocks x block size of one GPU's KV pool; max concurrency: requests of max_model_len tokens "
            "at once, as vLLM prints it (kvcalc size shows the budget behind each)"
        )
    return notes


def _cell(col: str, r: Row, c: Comparison, units: str) -> Any:
    res = r.result
    v = r.variant
    if col == "model":
        return r.given
    if col == "variant":
        return v.label if v else r.variant_key
    for k in c.varying:
        if col == SWEEP_FLAGS[k][0].lstrip("-"):
            return r.sweep[k]
    if col == "note":
        return _note(r)
    if col in ("N_q", "N_kv", "Q per KV") and v is not None:
        return {"N_q": v.num_query_heads, "N_kv": v.num_kv_heads, "Q per KV": v.query_heads_per_kv_head}[col]
    if res is None:
        return "-"
    fp = res.footprint
    if col in ("Q shape", "K/V shape"):
        sh = shapes(r)
        if not sh:
            return "-"
        if col == "Q shape":
            return _shape(sh["q_shape"])
        if sh["k_shape"] == sh["v_shape"]:
            return _shape(sh["k_shape"])
        return f"K {_shape(sh['k_shape'])} V {_shape(sh['v_shape'])}"
    if col == "attention":
        return fp.model.attention
    if col == "KV heads/rank":
        heads = max((x.kv_heads for x in fp.ranks), default=0)
        return f"{heads} (replicated)" if r.replicated else str(heads)
    if col == "bytes/token":
        return format_bytes(fp.bytes_per_token, units)
    if col == "bytes/token/rank":
        return format_bytes(fp.bytes_per_token_per_rank, units)
    if col == "ratio":
        return "-" if r.payload_part is None else r.payload_part
    if col == "effective KV":
        return format_bytes(fp.logical.effective_bytes, units)
    if col == "block-rounded KV":
        return format_bytes(fp.logical.block_rounded_bytes, units)
    if col in ("pool tokens", "max concurrency"):
        if res.pool is None:
            return "-"
        p = pool_payload(res.pool)
        if col == "pool tokens":
            return p.get("pool_tokens", "-")
        conc = p.get("max_concurrency")
        return "-" if conc is None else f"{conc:.2f}x"
    return "-"


def table_width(doc: Document) -> int:
    """Width that fits the widest row on one line (Rich folds cells otherwise), 120 to 240."""
    need = 0
    for t in doc.tables:
        widths = [len(str(c)) for c in t.columns]
        for row in t.rows:
            widths = [max(w, len(str(x))) for w, x in zip(widths, row)]
        if t.columns and t.columns[-1] == "note":  # long reasons may fold
            widths[-1] = min(widths[-1], 60)
        need = max(need, sum(widths) + 3 * len(widths) + 1)
    return max(120, min(need, 240))


def _note(r: Row) -> str:
    if r.error is not None:
        return r.error
    parts = []
    if r.replicated:
        parts.append("KV heads replicated across TP ranks")
    if r.result is not None and r.result.pool is not None:
        p = pool_payload(r.result.pool)
        if p.get("error"):  # vLLM's long start-up error, in short (the JSON keeps it whole)
            if p.get("fits_max_model_len") is False:
                est = p.get("estimated_max_model_len")
                parts.append(
                    f"max_model_len {p.get('max_model_len')} does not fit the pool"
                    + (f"; largest that fits: {est}" if est else "")
                )
            else:
                parts.append(str(p["error"]))
    return "; ".join(parts)
