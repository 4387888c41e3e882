"""`kvcalc fit`: the deployments that meet a concurrency target."""

from __future__ import annotations

from typing import Annotated

import typer

from kvcalc.app.settings import Settings
from kvcalc.cli import options as o
from kvcalc.errors import KvcalcError

FIT = (
    "gpu", "gpu_memory", "gpu_memory_utilization", "kv_cache_memory", "max_model_len", "block_size", "dtype", "weights_bytes",
    "activation_bytes", "overhead_bytes", "cudagraph_bytes", "max_num_batched_tokens", "vllm_version",
    "sglang_version", "mem_fraction_static", "chunked_prefill_size", "speculative_config",
)


def register(app: typer.Typer) -> None:
    o.command(app, "fit", settings=FIT)(fit)


def fit(
    model: o.Model,
    concurrency: Annotated[float, typer.Option("--concurrency", "-c", help="Requests of max_model_len served at once (per deployment)")],
    settings: Settings = o.FROM_FLAGS,
    max_gpus: Annotated[int, typer.Option("--max-gpus", help="Largest number of GPUs to consider")] = 8,
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", "--kv-cache-dtype", help="A dtype, a comma list, or 'any' (auto and fp8)")] = "auto",
    engine: Annotated[str, typer.Option("--engine", help="vllm (default), sglang, a comma list, or 'any' (both)")] = "vllm",
    no_dp: Annotated[bool, typer.Option("--no-dp", help="Do not add data-parallel replicas to reach the target")] = False,
    revision: o.Revision = None,
    show_rejected: Annotated[bool, typer.Option("--show-rejected/--hide-rejected", help="List the deployments that fail and why")] = True,
    format: o.Format = "table",
) -> None:
    """Search TP x PP (x kv dtype) on a GPU for a target concurrency at max_model_len: fewest GPUs first."""
    from kvcalc.app.fit import search
    from kvcalc.render import render
    from kvcalc.render.fit import fit_document, fit_payload

    fmt = o.check_format(format)
    dtypes = ["auto", "fp8"] if kv_dtype.strip().lower() == "any" else [d.strip() for d in kv_dtype.split(",") if d.strip()]
    engines = ["vllm", "sglang"] if engine.strip().lower() == "any" else [e.strip().lower() for e in engine.split(",") if e.strip()]
    for e in engines:
        if e not in ("vllm", "sglang"):
            raise KvcalcError(f"--engine {e!r} is not known; valid: vllm, sglang, a comma list or any")
    resolved = o.resolve(model, revision=revision)
    with o.status("searching deployments"):
        found = search(
            resolved.spec, settings, concurrency=concurrency, max_gpus=max_gpus, kv_dtypes=dtypes,
            allow_dp=not no_dp, checkpoint=resolved.checkpoint, engines=engines,
        )
    payload = fit_payload(
        resolved.spec.name, found, concurrency=concurrency, max_gpus=max_gpus, vllm_version=settings.vllm_version,
        engines=tuple(engines), sglang_version=settings.sglang_version,
    )
    doc = fit_document(payload, show_rejected=show_rejected)
    o.emit(render(fmt, payload, doc))
