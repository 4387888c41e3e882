"""The budget lines of a vLLM start-up log, compared with kvcalc's terms one by one.

Regexes for ``Model loading took``, ``torch peak memory increase``, ``non-torch forward
increase memory``, ``Estimated CUDA graph memory``, ``Available KV cache memory`` and the
settings that size them (total memory, utilization, max_num_seqs, max_num_batched_tokens,
enforce_eager, the sampler path, the compile cache's state). ``budget_rows`` turns the comparison into probe rows,
shown for context (``info``): the budget is a prediction, the pool check stays exact.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kvcalc.app.budget_check import GIB, compare, predict, within
from kvcalc.app.probe_report import Row
from kvcalc.core.quant import QUANTIZATIONS
from kvcalc.errors import KvcalcError

_NUM = r"(-?\d+(?:\.\d+)?)"
FIGURES: dict[str, re.Pattern[str]] = {
    "weights_gib": re.compile(r"(?:Model loading took\s*" + _NUM + r"\s*GiB|" + _NUM + r" GiB for weight\b)"),
    # "peak activation" beside "for weight" (0.20-0.26) is the torch peak increase (vllm==0.24.0: v1/worker/
    # gpu_worker.py:474, :717-718); beside "for consumed memory" (0.27+) the transient peak + the CUDA-graph
    # estimate (vllm==0.29.0: :601-603, :845-848)
    "torch_peak_gib": re.compile(
        r"(?:torch peak memory increase:\s*" + _NUM + r"\s*GiB|GiB for weight, " + _NUM + r" GiB for peak activation)"
    ),
    "peak_activation_gib": re.compile(r"GiB for consumed memory \(weights \+ non-torch\), " + _NUM + r" GiB for peak activation"),
    "non_torch_gib": re.compile(r"(?:non-torch forward increase memory:\s*" + _NUM + r"\s*GiB|" + _NUM + r" GiB for non-torch memory)"),
    "consumed_gib": re.compile(r"(?:" + _NUM + r" GiB for consumed memory|total consumed \(from mem_get_info\):\s*" + _NUM + r"\s*GiB)"),
    "cudagraph_gib": re.compile(r"Estimated CUDA graph memory:\s*" + _NUM + r"\s*GiB"),
    "available_kv_gib": re.compile(r"Available KV cache memory:\s*" + _NUM + r"\s*GiB"),
    "total_gib": re.compile(r"(?:Free memory on device \(\s*[\d.]+\s*/\s*|total_gpu_memory \()" + _NUM),
}
SETTINGS: dict[str, re.Pattern[str]] = {
    "gpu_memory_utilization": re.compile(
        r"(?:gpu_memory_utilization['\"]?\s*[:=]\s*|Desired GPU memory utilization is \(|Requested memory:\s*)" + _NUM
    ),
    "max_num_seqs": re.compile(r"max_num_seqs['\"]?\s*[:=]\s*(\d+)"),
    "max_num_batched_tokens": re.compile(r"max_num_batched_tokens['\"]?\s*[:=]\s*(\d+)"),
    "enforce_eager": re.compile(r"enforce_eager['\"]?\s*[:=]\s*(True|False)"),
    # a hybrid model's state pages depend on both (kvcalc.core.mamba_cache)
    "enable_prefix_caching": re.compile(r"enable_prefix_caching['\"]?\s*[:=]\s*(True|False)"),
    "mamba_cache_mode": re.compile(r"mamba_cache_mode['\"]?\s*[:=]\s*['\"]?(none|align|all)\b"),
    # the --quantization the user gave (the non-default args): for an AWQ checkpoint, 'awq' forces vLLM's plain kernel
    "quantization": re.compile(r"'quantization': '([a-z0-9_-]+)'"),
}
_BOOLS = ("enforce_eager", "enable_prefix_caching")
_TEXT = {"mamba_cache_mode": ("none", "align", "all"), "quantization": QUANTIZATIONS}
FLASHINFER_SAMPLER = re.compile(r"Using FlashInfer for top-p & top-k sampling")
# 0.21+ print these when FlashInfer's sampler is off (VLLM_USE_FLASHINFER_SAMPLER=0) or cannot run on the GPU; the
# sampler then takes the Triton top-k/top-p (vllm==0.28.0: v1/sample/ops/topk_topp_sampler.py:47, :70;
# vllm==0.33.0: :121-124, :156-160, :515-518)
TRITON_SAMPLER = re.compile(r"FlashInfer top-p/top-k sampling (?:disabled via|unavailable)")
# the torch.compile cache's state, as vLLM logs it at INFO: a cold compile ("Compiling a graph for compile range
# %s takes %.2f s", "saved AOT compiled function"; vllm==0.29.0: compilation/backends.py:393-397, decorators.py:719)
# or artifacts loaded ("Directly load the compiled graph(s) for compile range %s from the cache", "Directly load
# AOT compilation from path"; backends.py:292-296, decorators.py:313-315); 0.10-0.11 say "dynamic shape"
COMPILE_WARM = re.compile(r"Directly load (?:the compiled graph|AOT compilation)")
COMPILE_COLD = re.compile(r"Compiling a graph for (?:compile range|dynamic shape)|saved AOT compiled function")
COMPILE_SECONDS = re.compile(r"Compiling a graph for (?:compile range|dynamic shape)[^\n]*? takes ([0-9.]+) s")
MAX_TEXT = 64 << 20


def parse_budget(text: str) -> tuple[dict[str, float], dict[str, Any]]:
    """(logged figures in GiB, engine settings) from a log's text; the smallest figure per
    term when several workers print it (the engine keeps the smallest worker)."""
    figures: dict[str, float] = {}
    for key, rx in FIGURES.items():
        values = [float(next(g for g in m.groups() if g is not None)) for m in rx.finditer(text)]
        if values:
            figures[key] = min(values) if key == "available_kv_gib" else max(values)
    settings: dict[str, Any] = {}
    for key, rx in SETTINGS.items():
        m = rx.search(text)
        if m:
            v = m.group(1)
            if key in _BOOLS:
                settings[key] = v == "True"
            elif key in _TEXT:
                if v in _TEXT[key]:  # not e.g. awq_marlin: vLLM's own choice, not a flag kvcalc takes
                    settings[key] = v
            else:
                settings[key] = float(v) if "." in v else int(v)
    if FLASHINFER_SAMPLER.search(text):
        settings["sampler"] = "flashinfer"
    elif TRITON_SAMPLER.search(text):
        settings["sampler"] = "triton"
    if COMPILE_WARM.search(text):
        settings["compile_cache"] = "warm"
    elif COMPILE_COLD.search(text):
        settings["compile_cache"] = "cold"
    return figures, settings


def budget_rows(model: Any, settings: Any, path: str, checkpoint: dict | None = None) -> tuple[list[Row], list[str]]:
    """Rows comparing each budget term the log printed with kvcalc's (info only), and notes."""
    p = Path(path).expanduser()
    try:
        with p.open("r", encoding="utf-8", errors="replace") as fh:
            text = fh.read(MAX_TEXT)
    except OSError:
        return [], []
    figures, logged_settings = parse_budget(text)
    if "available_kv_gib" not in figures:
        return [], []
    changes = {k: v for k, v in logged_settings.items()
               if getattr(settings, k, None) is None or (k == "enforce_eager" and not settings.enforce_eager)}
    if "total_gib" in figures and settings.gpu_memory is None:
        changes["gpu_memory"] = f"{figures['total_gib']}GiB"
    s = settings.with_(**changes)
    if s.gpu is None and s.gpu_memory is None:
        return [], ["budget terms not compared: the log prints no total memory; pass --gpu or --gpu-memory"]
    try:
        predicted, sources = predict(model, s.with_(kv_cache_memory=None, num_gpu_blocks_override=None), checkpoint)
    except KvcalcError as exc:
        return [], [f"budget terms not compared: {exc}"]
    rows = []
    for r in compare(figures, predicted, sources):
        ok = within(r.error_gib, r.logged_gib)
        rows.append(Row(
            f"budget: {r.term} ({r.log_line})", round(r.kvcalc_gib * GIB), round(r.logged_gib * GIB), info=True,
            note=f"kvcalc {r.kvcalc_gib:.2f} GiB vs logged {r.logged_gib:.2f} GiB: {r.error_gib:+.2f} GiB "
                 f"({'within' if ok else 'outside'} max(2 %, 0.25 GiB)); kvcalc's source: {r.source}",
        ))
    notes = [f"budget settings read from the log: {logged_settings}"] if logged_settings else []
    seconds = COMPILE_SECONDS.search(text)
    if logged_settings.get("compile_cache") == "cold" and "compile_cache" in changes and seconds:
        notes.append(
            f"compile_cache cold: vLLM's cache missed and the compile took {seconds.group(1)} s; where torch Inductor's own "
            "FX graph cache (/tmp/torchinductor_<user> unless TORCHINDUCTOR_CACHE_DIR says otherwise) held the graph from "
            "an earlier launch on the machine, nothing was autotuned: give --compile-cache warm"
        )
    return rows, notes
