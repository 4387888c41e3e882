"""`kvcalc gpus`: the GPU catalog behind --gpu, with each memory figure's source."""

from typing import Any

import typer

from kvcalc.cli import options as o


def register(app: typer.Typer) -> None:
    app.command("gpus")(gpus)


def gpus(format: o.Format = "table", units: o.Units = "iec") -> None:
    """List the GPUs --gpu knows: total memory in bytes as the driver reports it, and its source."""
    from kvcalc.core.engine import default_max_num_batched_tokens
    from kvcalc.core.gpus import CATALOG
    from kvcalc.core.units import format_bytes
    from kvcalc.render import Document, Table, render

    fmt = o.check_format(format)
    u = o.check_units(units)
    rows: list[dict[str, Any]] = []
    for g in CATALOG:
        mnbt, _ = default_max_num_batched_tokens(g.memory_bytes, g.name)
        rows.append({"name": g.name, "aliases": list(g.aliases), "memory_bytes": g.memory_bytes,
                     "memory_bytes_r580": g.total_r580 or None, "default_max_num_batched_tokens": mnbt,
                     "cuda_total": g.cuda, "source": g.source, "source_r580": g.r580_source or None})
    doc = Document("GPU catalog")
    doc.notes = [
        "memory: CUDA's total where marked (what vLLM sizes from), else nvidia-smi's or the vendor's figure; pass "
        "--gpu-memory with the figure from vLLM's log, or --gpu auto on the machine",
        "R580+: CUDA's total under the newer drivers (seen from the 570 series on), which kvcalc takes for vLLM 0.20.1+ "
        "(CUDA 13 builds, driver 580+) or --nvidia-driver 570 and later",
    ]
    doc.tables.append(
        Table("", ["GPU", "memory", "bytes", "CUDA total", "R580+", "serve max_num_batched_tokens", "source"],
              [[r["name"], format_bytes(r["memory_bytes"], u), r["memory_bytes"], "yes" if r["cuda_total"] else "no",
                format_bytes(r["memory_bytes_r580"], u) if r["memory_bytes_r580"] else "",
                r["default_max_num_batched_tokens"],
                r["source"] + (f"; R580+: {r['source_r580']}" if r["source_r580"] else "")] for r in rows],
              align=["l", "r", "r", "l", "r", "r", "l"])
    )
    o.emit(render(fmt, rows, doc))
