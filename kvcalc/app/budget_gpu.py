"""The GPU side of the budget's inputs: the card's total memory (catalog, local device or
--gpu-memory, with the driver era), its catalog entry, and the note an ambiguous --gpu alias earns.
Shared by the vLLM budget (app.budget), the SGLang budget and the hybrid state-page rules."""

from __future__ import annotations

from typing import Any

from kvcalc.app.settings import Settings
from kvcalc.core.budget_rules import COMPILE_CACHES, SAMPLERS
from kvcalc.core.gpus import CATALOG, Gpu, cuda_total, find_gpu, is_auto, match_device
from kvcalc.core.quant import QUANTIZATIONS
from kvcalc.core.units import figure, parse_size
from kvcalc.core.vllm_rules import RuleLine
from kvcalc.errors import PlanError, named

DRIVER_BRANCHES = (100, 9999)  # NVIDIA's branches run 3 digits (R384 ... R580); 4 leaves room, more is a typo
# the first branch known to report the lower totals (Gpu.total_r580): deviceQuery under "CUDA Driver Version 12.8", the
# 570 series, prints them for an RTX 3070 (7817 MBytes against 7974 under 11.x drivers; search-index file 12020098570)
# and an RTX 2080 Ti (10823 against 11019; file 28045807215, and cuMemGetInfo on driver 570.133.20 in
# github.com/grgalex/nvshare/issues/26); drivers 545-565 were not seen, and count as older
LOWER_TOTALS_FROM = 570


def optional_size(value: Any, flag: str) -> int | None:
    """A size setting in bytes, or None where it is not set."""
    return None if value is None else parse_size(value, flag)


def check_driver(driver: int | None) -> None:
    """--nvidia-driver names a driver branch (DRIVER_BRANCHES)."""
    if driver is not None and not (DRIVER_BRANCHES[0] <= driver <= DRIVER_BRANCHES[1]):
        raise PlanError(f"{named('nvidia_driver')} is a driver branch such as 570 or 580 (a number of 3 or 4 digits), got {driver}")


def gpu_total(s: Settings, line: RuleLine | None = None) -> tuple[str | None, int | None, str]:
    """The GPU's name, its total memory (the R580-era figure for a CUDA 13 release) and where it comes from."""
    gpu_name, total, source, driver = None, None, "", s.nvidia_driver
    check_driver(driver)
    if is_auto(s.gpu):
        from kvcalc.sources.localgpu import detect

        gpu_name, total, source = detect()
    elif s.gpu is not None:
        gpu = find_gpu(s.gpu)
        gpu_name, (total, src) = gpu.name, cuda_total(gpu, driver >= LOWER_TOTALS_FROM if driver else bool(line and line.cuda13_wheel), driver)
        source = f"catalog {gpu.name}: " + (src if gpu.cuda else f"{src}; pass --gpu-memory with vLLM's figure")
    if s.gpu_memory is not None:
        total = parse_size(s.gpu_memory, named("gpu_memory"))
        source = "--gpu-memory"
        if total <= 0:
            raise PlanError(f"{named('gpu_memory')} must be larger than 0")
    return gpu_name, total, source


def catalog_gpu(s: Settings, gpu_name: str | None) -> Gpu | None:
    """The catalog entry for --gpu; for --gpu auto, the local device's name matched to the catalog
    (None for a card the catalog does not hold)."""
    if gpu_name is None or s.gpu is None:
        return None
    if is_auto(s.gpu):
        return match_device(gpu_name)
    return find_gpu(s.gpu)


def settings_gpu(s: Settings) -> Gpu | None:
    """The catalog entry of --gpu, or of the local card for --gpu auto (detected once per process); None without one."""
    if not is_auto(s.gpu):
        return catalog_gpu(s, s.gpu)
    from kvcalc.sources.localgpu import detect

    return catalog_gpu(s, detect()[0])


def ambiguous_gpu(asked: str | None) -> tuple[str, ...]:
    """A short alias that other cards' names also start with (--gpu A100) says what it means."""
    if asked is None or is_auto(asked):
        return ()
    gpu = find_gpu(asked)
    key = asked.strip().upper().replace("_", "-").replace(" ", "-")
    if key == gpu.name.upper():
        return ()
    others = [g.name for g in CATALOG if g is not gpu and g.name.upper().startswith(key)]
    if not others:
        return ()
    return (
        f"--gpu {asked} means {gpu.name} ({figure(gpu.memory_bytes)}); "
        f"give --gpu {' or --gpu '.join(others)} for the other {'card' if len(others) == 1 else 'cards'}",
    )


def check_budget_words(s: Settings) -> None:
    """The budget's settings that take one of a few words, or a driver branch: checked whether or not a
    budget is computed (a --sampler typo without --gpu is still wrong; app.service.check_flags calls it only
    when one of them is given, for start-up time)."""
    for name, value, valid in (("sampler", s.sampler, SAMPLERS), ("compile_cache", s.compile_cache, COMPILE_CACHES)):
        if value is not None and value not in valid:
            raise PlanError(f"{named(name)} {value!r} is not known; valid: {', '.join(valid)}")
    if s.quantization is not None and str(s.quantization).strip().lower() not in QUANTIZATIONS:
        raise PlanError(f"{named('quantization')} {s.quantization!r} is not known; valid: {', '.join(QUANTIZATIONS)}")
    check_driver(s.nvidia_driver)
    if s.speculative_config is not None:
        from kvcalc.app.speculation import parse

        parse(s.speculative_config)  # vLLM's JSON, its keys and method (the drafter is built with the model)
