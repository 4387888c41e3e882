"""The GPU catalog's CUDA totals against the lines they were copied from (tests/data/gpu-totals/SOURCES.md).

Every ``cuda=True`` entry needs one ``primary`` row; its bytes must round to the printed figure
(0.01 GiB, or the exact byte count where one is printed), so neither file can drift from the other."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcalc.core.gpus import CATALOG, GIB, Gpu

SOURCES = Path(__file__).parent / "data" / "gpu-totals" / "SOURCES.md"
# Entries whose CUDA figure has no citable URL yet (kvcalc's own measurement, or the earlier run notes).
NO_URL_YET = {"H100-80GB", "A100-80GB", "H200", "L40S", "H100-PCIe",
              # public files the search index holds without naming their repository (the id is in the source)
              "H100-64GB", "RTX-4080", "RTX-4080-SUPER", "RTX-5080", "RTX-5060-Ti", "RTX-4060-Ti-16GB",
              "RTX-4070-Ti-SUPER", "RTX-3090-Ti", "RTX-4090-D", "RTX-3080", "V100-32GB", "V100-16GB", "MI250X", "MI355X",
              "B300", "RTX-3060-Ti", "RTX-3080-Ti"}


def _rows() -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in SOURCES.read_text().splitlines():
        if not line.startswith("| "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if header is None:
            header = cells
        elif not set(line) <= {"|", "-", " "}:
            assert len(cells) == len(header), line
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


ROWS = _rows()
CUDA = [g for g in CATALOG if g.cuda]


def _primary(gpu: Gpu) -> dict[str, str]:
    found = [r for r in ROWS if r["GPU"] == gpu.name and r["role"] == "primary"]
    assert len(found) == 1, f"{gpu.name}: {len(found)} primary rows in {SOURCES.name}"
    return found[0]


def _gib(row: dict[str, str]) -> float:
    if row["unit"] == "MiB":
        return float(row["figure"]) / 1024
    return int(row["figure"]) / GIB if row["unit"] == "bytes" else float(row["figure"])


def test_table_is_well_formed() -> None:
    assert ROWS
    names = {g.name for g in CATALOG}
    for r in ROWS:
        assert r["GPU"] in names, r["GPU"]
        assert r["role"] in {"primary", "agrees", "differs", "r580"}, r
        assert r["unit"] in {"GiB", "MiB", "bytes"}, r
        assert r["quoted line"].startswith("`") and r["quoted line"].endswith("`"), r
        assert r["URL"] == "none" or r["URL"].startswith("https://github.com/"), r
        assert r["how the GPU was identified"], r


@pytest.mark.parametrize("gpu", CUDA, ids=lambda g: g.name)
def test_cuda_total_matches_its_quoted_line(gpu: Gpu) -> None:
    row = _primary(gpu)
    if row["unit"] == "bytes":
        assert gpu.memory_bytes == int(row["figure"])
    elif row["unit"] == "MiB":  # a driver's own cuMemGetInfo total, printed in MiB
        decimals = len(row["figure"].partition(".")[2])
        assert round(gpu.memory_bytes / 2**20, decimals) == float(row["figure"])
    else:
        decimals = len(row["figure"].partition(".")[2])
        assert round(gpu.memory_bytes / GIB, decimals) == float(row["figure"])
    if row["URL"] == "none":
        assert gpu.name in NO_URL_YET, f"{gpu.name}: a CUDA figure needs a URL in {SOURCES.name}"
    else:
        assert gpu.name not in NO_URL_YET, f"{gpu.name} has a URL now: drop it from NO_URL_YET"
        assert row["URL"].removeprefix("https://") in gpu.source, (gpu.source, row["URL"])
        assert row["figure"] in row["quoted line"] and row["figure"] in gpu.source


def test_primary_rows_are_cuda_entries_and_agreeing_rows_agree() -> None:
    for r in ROWS:
        gpu = next(g for g in CATALOG if g.name == r["GPU"])
        assert gpu.cuda, f"{gpu.name} has a quoted CUDA figure but cuda=False"
        if r["role"] == "agrees":
            assert abs(_gib(r) - _gib(_primary(gpu))) <= 0.02 + 1e-9, r
        if r["role"] == "differs":
            assert abs(_gib(r) - _gib(_primary(gpu))) > 0.02, f"{r['URL']} agrees: mark it 'agrees'"


def test_cuda_figures_sit_under_the_nvidia_smi_totals_they_replace() -> None:
    # nvidia-smi's totals (MiB) for the cards this change moved to CUDA figures: an upper bound.
    smi = {"H100-NVL": 95830, "B200": 183359, "A100-40GB": 40960, "T4": 15360, "RTX-5090": 32607,
           "RTX-4090": 24564, "RTX-3090": 24576, "RTX-A6000": 49140, "RTX-6000-Ada": 46068, "RTX-3060": 12288,
           "L4": 23034, "A10G": 23028, "H20": 97871, "H100-PCIe": 81559}
    for name, mib in smi.items():
        gpu = next(g for g in CATALOG if g.name == name)
        assert 0 < mib * 2**20 - gpu.memory_bytes < 2 * GIB, name


def test_r580_totals_match_their_quoted_lines() -> None:
    """An entry's R580-era total (used for vLLM's CUDA 13 releases) has one quoted row, and only such entries have one."""
    r580 = {r["GPU"]: r for r in ROWS if r["role"] == "r580"}
    assert r580, "no r580 row"
    for gpu in CATALOG:
        row = r580.get(gpu.name)
        assert (row is not None) == bool(gpu.total_r580), gpu.name
        if row is not None:
            exact = gpu.total_r580 == int(row["figure"]) if row["unit"] == "bytes" else round(gpu.total_r580 / GIB, 2) == float(row["figure"])
            assert exact and row["figure"] in gpu.r580_source, gpu.name
            if row["URL"] == "none":  # a public file the search index holds without its repository
                assert "index file" in gpu.r580_source, gpu.name
            else:
                assert row["URL"].removeprefix("https://") in gpu.r580_source


def test_gpus_lists_the_r580_totals(run_json) -> None:
    """`kvcalc gpus` shows the R580-era figure beside the older one: the T4's 14.56 GiB is the 0.28.0 Colab
    log's 'Free memory on device (14.46/14.56 GiB)', its 14.74 GiB the torch OOM line (SOURCES.md)."""
    rows = {r["name"]: r for r in run_json("gpus")}
    t4 = rows["T4"]
    assert abs(t4["memory_bytes_r580"] - 14.56 * GIB) <= 0.005 * GIB and abs(t4["memory_bytes"] - 14.74 * GIB) <= 0.005 * GIB
    assert "dipan010/keel" in t4["source_r580"]
    assert rows["H100-80GB"]["memory_bytes_r580"] is None and rows["H100-80GB"]["source_r580"] is None
