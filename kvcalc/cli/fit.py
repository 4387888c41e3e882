"""`kvcalc fit`: the deployments that meet a concurrency target."""

from __future__ import annotations

from typing import Annotated

import typer

from kvcalc.cli import options as o


def register(app: typer.Typer) -> None:
    app.command("fit")(fit)


def fit(
    model: o.Model,
    concurrency: Annotated[float, typer.Option("--concurrency", "-c", help="Requests of max_model_len served at once (per deployment)")],
    gpu: o.Gpu = None,
    gpu_memory: o.GpuMemory = None,
    gpu_memory_utilization: o.GpuUtil = None,
    kv_cache_memory: o.KvCacheMemory = None,
    max_model_len: o.MaxModelLen = None,
    max_gpus: Annotated[int, typer.Option("--max-gpus", help="Largest number of GPUs to consider")] = 8,
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", "--kv-cache-dtype", help="A dtype, a comma list, or 'any' (auto and fp8)")] = "auto",
    no_dp: Annotated[bool, typer.Option("--no-dp", help="Do not add data-parallel replicas to reach the target")] = False,
    block_size: o.BlockSize = None,
    dtype: o.Dtype = None,
    weights_bytes: o.WeightsBytes = None,
    activation_bytes: o.ActivationBytes = None,
    overhead_bytes: o.OverheadBytes = None,
    cudagraph_bytes: o.CudagraphBytes = None,
    max_num_batched_tokens: o.MaxNumBatchedTokens = None,
    vllm_version: o.VllmVersion = "0.33",
    revision: o.Revision = None,
    show_rejected: Annotated[bool, typer.Option("--show-rejected/--hide-rejected", help="List the deployments that fail and why")] = True,
    format: o.Format = "table",
) -> None:
    """Search TP x PP (x kv dtype) on a GPU for a target concurrency at max_model_len: fewest GPUs first."""
    from kvcalc.app.fit import search
    from kvcalc.render import Document, Table, render
    from kvcalc.app.service import Settings
    from kvcalc.sources.resolve import resolve

    fmt = o.check_format(format)
    names = Settings.names()
    base = Settings(**{k: v for k, v in locals().items() if k in names and k not in ("kv_dtype",)})
    dtypes = ["auto", "fp8"] if kv_dtype.strip().lower() == "any" else [d.strip() for d in kv_dtype.split(",") if d.strip()]
    resolved = resolve(model, revision=revision)
    found = search(
        resolved.spec, base, concurrency=concurrency, max_gpus=max_gpus, kv_dtypes=dtypes,
        allow_dp=not no_dp, checkpoint=resolved.checkpoint,
    )
    rows = [c.payload(concurrency) for c in found]
    ok = [r for r in rows if r["ok"]]
    payload = {
        "model": resolved.spec.name,
        "target_concurrency": concurrency,
        "max_gpus": max_gpus,
        "vllm_version": base.vllm_version,
        "deployments": ok,
        "rejected": [r for r in rows if not r["ok"]],
    }
    doc = Document(f"Deployments of {resolved.spec.name} for {concurrency:g} concurrent requests (vLLM {base.vllm_version} rules)")
    doc.tables.append(
        Table(
            "Meets the target (fewest GPUs first, then most headroom)",
            ["TP", "PP", "DP", "GPUs", "kv dtype", "concurrency/replica", "total", "headroom", "pool tokens/replica"],
            [[r["tp"], r["pp"], r["dp"], r["gpus"], r["kv_dtype"], f"{r['max_concurrency_per_replica']:.2f}x",
              f"{r['max_concurrency']:.2f}x", f"{r['headroom']:+.0%}", f"{r['pool_tokens_per_replica']:,}"] for r in ok],
        )
    )
    if show_rejected:
        doc.tables.append(
            Table("Rejected", ["TP", "PP", "kv dtype", "why"],
                  [[r["tp"], r["pp"], r["kv_dtype"], r["reason"]] for r in rows if not r["ok"]],
                  align=["r", "r", "l", "l"])
        )
    if not ok:
        doc.notes.append("no deployment meets the target within --max-gpus")
    o.emit(render(fmt, payload, doc))
