"""Check 3: start vLLM itself with dummy weights and compare its pool with kvcalc's.

Only where vLLM and a CUDA GPU are present; elsewhere the probe exits 3 and says why.
vLLM is started in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) from the resolved
config written to a temporary folder, with ``load_format="dummy"`` (random weights, no
download), no tokenizer and the Hub offline. kvcalc then takes the exact bytes the worker
found available (``Worker.available_kv_cache_memory_bytes``; ``--kv-cache-memory`` sets them
outright) and predicts, for that memory, the block count, the token figure and the
concurrency vLLM logs, and the bytes of the KV tensors the worker allocated.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.app.probe_report import Check, EngineFacts, Row
from kvcalc.app.settings import DEFAULT_VLLM_VERSION
from kvcalc.errors import KvcalcError
from kvcalc.probe import env

if TYPE_CHECKING:
    from kvcalc.core.pool import PoolReport


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(record.getMessage())
        except Exception:  # noqa: BLE001 - a log record that cannot format is skipped
            pass


def _worker(llm: Any) -> Any:
    """The in-process GPU worker, through the engine's public attributes (best effort)."""
    path = ("llm_engine", "engine_core", "engine_core", "model_executor", "driver_worker", "worker")
    obj = llm
    for name in path:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def _kv_tensor_bytes(worker: Any) -> int | None:
    runner = getattr(worker, "model_runner", None)
    caches = getattr(runner, "kv_caches", None)
    if not caches:
        return None
    seen: dict[int, int] = {}
    items = caches.values() if isinstance(caches, dict) else caches
    for t in items:
        if t is None:
            continue
        for x in t if isinstance(t, (list, tuple)) else [t]:
            st = x.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values()) if seen else None


def probe_engine(resolved: Any, settings: Any, *, engine: str) -> Check:
    if engine.strip().lower() != "vllm":
        raise KvcalcError(f"--engine {engine!r} is not known; valid: vllm")
    torch = env.need_torch()
    try:
        import vllm
    except ImportError:
        raise env.cannot("--engine vllm needs vLLM, which is not installed here (pip install vllm, on a CUDA machine)") from None
    if not torch.cuda.is_available():
        raise env.cannot("--engine vllm needs a CUDA GPU; torch sees none here")
    model = resolved.spec
    if not isinstance(resolved.config, dict) or not resolved.config.get("architectures"):
        raise env.cannot(f"{model.name}: the config names no architectures, so vLLM cannot pick a model class")
    kv_bytes = None
    if settings.kv_cache_memory is not None:
        from kvcalc.core.units import parse_size

        kv_bytes = parse_size(settings.kv_cache_memory, "--kv-cache-memory")
    L = settings.max_model_len or min(model.max_model_len, 4096)
    capture = _Capture()
    llm = _start(vllm, resolved, _engine_kwargs(settings, L, kv_bytes), capture)
    worker = _worker(llm)
    cache_cfg = llm.llm_engine.vllm_config.cache_config
    block_size = cache_cfg.block_size
    available = _available(worker, kv_bytes, capture)
    pool = _predicted_pool(resolved, settings, available, L, block_size, _release(vllm.__version__))
    rows = _engine_rows(pool, cache_cfg.num_gpu_blocks, available, worker, capture, L)
    check = Check("engine", f"vLLM {vllm.__version__} with dummy weights", f"vLLM {vllm.__version__} ({pool.inputs.rules_note})", rows)
    check.facts = EngineFacts(available_bytes=int(available), memory_given=bool(kv_bytes), max_model_len=L,
                              block_size=block_size, gpu=torch.cuda.get_device_name(0))
    check.explanation = [
        "kvcalc's prediction takes the exact bytes vLLM's worker found available and applies the pool rules of "
        "the installed vLLM's release line (grouping, bytes per block, null block, concurrency)",
    ]
    check.details = {"log": [x for x in capture.lines if "KV cache" in x or "concurrency" in x]}
    del llm
    return check


def _engine_kwargs(settings: Any, max_model_len: int, kv_bytes: int | None) -> dict[str, Any]:
    """vllm.LLM's arguments: dummy weights, no tokenizer, eager, and the settings given."""
    kwargs: dict[str, Any] = {
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "max_model_len": max_model_len,
        "tensor_parallel_size": settings.tp,
        "pipeline_parallel_size": settings.pp,
        "kv_cache_dtype": settings.kv_dtype,
        "enforce_eager": True,
    }
    if settings.block_size:
        kwargs["block_size"] = settings.block_size
    if settings.dtype:
        kwargs["dtype"] = settings.dtype
    if settings.max_num_batched_tokens:
        kwargs["max_num_batched_tokens"] = settings.max_num_batched_tokens
    if kv_bytes is not None:
        kwargs["kv_cache_memory_bytes"] = kv_bytes
    elif settings.gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = settings.gpu_memory_utilization
    return kwargs


def _start(vllm: Any, resolved: Any, kwargs: dict[str, Any], capture: _Capture) -> Any:
    """vLLM started in this process from the resolved config, its log captured while it starts."""
    vlog = logging.getLogger("vllm")
    vlog.addHandler(capture)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="kvcalc-probe-") as tmp:
        Path(tmp, "config.json").write_text(json.dumps(resolved.config), encoding="utf-8")
        try:
            llm = vllm.LLM(model=tmp, **kwargs)
        except Exception as exc:  # noqa: BLE001 - vLLM raises many kinds; report the engine's reason
            vlog.removeHandler(capture)
            raise env.cannot(f"vLLM {vllm.__version__} did not start {resolved.spec.name}: {type(exc).__name__}: {exc}") from None
    vlog.removeHandler(capture)
    return llm


def _available(worker: Any, kv_bytes: int | None, capture: _Capture) -> int:
    """The bytes the worker found available for the KV cache: its attribute, else
    --kv-cache-memory, else the figure its log printed."""
    from kvcalc.probe.vllm_log import memory_range, parse_log

    available = getattr(worker, "available_kv_cache_memory_bytes", None) if worker is not None else None
    if available is None and kv_bytes is not None:
        available = kv_bytes
    if available is None:
        parsed = parse_log("\n".join(capture.lines))
        if not parsed.available_gib:
            raise env.cannot("vLLM started but the probe could read neither the worker's available memory nor its log")
        available = memory_range(min(parsed.available_gib))[1]
    return available


def _release(version: str) -> str:
    """The installed vLLM's release if kvcalc can read it (a source build may print 0.1.dev...), else 0.33."""
    from kvcalc.core.vllm_rules import rules_for
    from kvcalc.errors import PlanError

    try:
        rules_for(version)
    except PlanError:
        return DEFAULT_VLLM_VERSION
    return version


def _predicted_pool(
    resolved: Any, settings: Any, available: int, max_model_len: int, block_size: int, release: str = DEFAULT_VLLM_VERSION
) -> PoolReport:
    from kvcalc.app.service import evaluate

    s = settings.with_(
        kv_cache_memory=str(int(available)), max_model_len=max_model_len, block_size=block_size, vllm_version=release,
        gpu=None, gpu_memory=None, gpu_memory_utilization=None,
    )
    pool = evaluate(resolved.spec, s, checkpoint=resolved.checkpoint).pool
    if pool is None:
        raise KvcalcError(f"{resolved.spec.name}: kvcalc has no pool figures for this model")
    return pool


def _engine_rows(pool: PoolReport, num_blocks: int, available: int, worker: Any, capture: _Capture,
                 L: int) -> list[Row]:
    from kvcalc.probe.vllm_log import parse_log

    rows = [
        Row("num_gpu_blocks", pool.num_blocks, num_blocks, unit="blocks",
            note=f"{int(available):,} B available // {pool.bytes_per_block:,} B per block"),
    ]
    tensor_bytes = _kv_tensor_bytes(worker) if worker is not None else None
    if tensor_bytes is not None:
        rows.append(Row("KV cache tensors allocated (distinct storages)", pool.pool_bytes_per_gpu, tensor_bytes,
                        note="num_blocks x bytes_per_block: one int8 buffer"))
    logged = parse_log("\n".join(capture.lines))
    if logged.tokens is not None:
        rows.append(Row("GPU KV cache size (logged)", pool.kv_cache_size_tokens, logged.tokens, unit="tokens",
                        note="int(max_concurrency x max_model_len)"))
    if logged.concurrency is not None:
        rows.append(Row(f"Maximum concurrency for {L:,} tokens (logged)", round(pool.max_concurrency, 2),
                        logged.concurrency, unit="x", tolerance=0.005,
                        note=f"num_blocks / {pool.blocks_per_request} blocks per request, logged with 2 decimals"))
    return rows
