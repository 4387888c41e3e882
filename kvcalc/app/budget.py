"""The memory budget per GPU: every term with its source (a flag, the GPU catalog, the
checkpoint's metadata, or an estimate from the config), turned into the KV memory each
PP stage's workers have (vLLM ``gpu_worker.determine_available_memory``)."""

from __future__ import annotations

import math
from typing import Any

from kvcalc.core.engine import default_max_num_batched_tokens, max_concurrent_batches
from kvcalc.core.footprint import CacheSettings
from kvcalc.core.gpus import find_gpu
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan
from kvcalc.core.pool import BudgetTerm, PoolInputs
from kvcalc.core.units import format_bytes, parse_size
from kvcalc.core.weights import estimate_weights
from kvcalc.errors import PlanError, named

MIB = 1 << 20
DEFAULT_UTILIZATION = 0.92


def _size(value: Any, flag: str) -> int | None:
    return None if value is None else parse_size(value, flag)


def _ambiguous_gpu(asked: str, gpu: Any) -> list[str]:
    """A short alias that other cards' names also start with (--gpu A100) says what it means."""
    from kvcalc.core.gpus import CATALOG

    key = asked.strip().upper().replace("_", "-").replace(" ", "-")
    if key == gpu.name.upper():
        return []
    others = [g.name for g in CATALOG if g is not gpu and g.name.upper().startswith(key)]
    if not others:
        return []
    return [f"--gpu {asked} means {gpu.name} ({format_bytes(gpu.memory_bytes)}); "
            f"give --gpu {' or --gpu '.join(others)} for the other {'card' if len(others) == 1 else 'cards'}"]


def _weights(model: ModelSpec, s: Any, plan: ParallelPlan, checkpoint: dict | None) -> tuple[tuple[int, ...], str]:
    """Weights per GPU of each PP stage, and their source: --weights-bytes, the checkpoint's
    metadata (split in the estimate's proportions), or the estimate from the config."""
    est = estimate_weights(model, plan)
    weights_flag = _size(s.weights_bytes, named("weights_bytes"))
    if weights_flag is not None or (checkpoint and checkpoint.get("bytes")):
        whole = weights_flag if weights_flag is not None else int(checkpoint["bytes"])
        src = "--weights-bytes" if weights_flag is not None else f"checkpoint metadata ({checkpoint.get('source', 'safetensors')})"
        est_total = sum(est.bytes_per_stage) * plan.tp or 1
        weights = tuple(round(whole * b / est_total) for b in est.bytes_per_stage)
        if plan.world_size // plan.dp > 1:
            src += ", split across ranks in the estimate's proportions"
    else:
        weights = est.bytes_per_stage
        src = f"{est.method}: {est.parameters:,} parameters (pass --weights-bytes for the exact figure)"
    return tuple(weights), src


def _engine_terms(model: ModelSpec, s: Any, plan: ParallelPlan, cache: CacheSettings, mnbt: int) -> tuple[int, str, int, str, int, str]:
    """Activation peak, non-torch memory and CUDA graphs per GPU, each with its source (a flag,
    --enforce-eager, or an estimate)."""
    act = _size(s.activation_bytes, named("activation_bytes"))
    act_src = "--activation-bytes"
    if act is None:
        from kvcalc.core.weights import arch_int

        a = model.arch
        h = arch_int(a, "hidden_size") or arch_int(a, "d_model")
        inter = arch_int(a, "intermediate_size") or arch_int(a, "moe_intermediate_size") or 4 * h
        vocab = arch_int(a, "vocab_size")
        dt = cache.mamba_dtype_bytes
        act = mnbt * (4 * h + 2 * inter // plan.tp) * dt + 256 * vocab // plan.tp * 4
        act_src = (
            "estimate: max_num_batched_tokens x (4 x hidden + 2 x intermediate / TP) x dtype + 256 sequences of fp32 "
            "logits (vLLM profiles the real peak; pass --activation-bytes from its log)"
        )
    over = _size(s.overhead_bytes, named("overhead_bytes"))
    over_src = "--overhead-bytes"
    if over is None:
        over = 512 * MIB + (256 * MIB if plan.tp * plan.pp > 1 else 0)
        over_src = "estimate: CUDA context, plus NCCL buffers when TP x PP > 1; pass --overhead-bytes"
    graph = _size(s.cudagraph_bytes, named("cudagraph_bytes"))
    graph_src = "--cudagraph-bytes"
    if getattr(s, "enforce_eager", False):
        if graph:
            raise PlanError(f"{named('enforce_eager')} captures no CUDA graphs; drop {named('cudagraph_bytes')} or it")
        graph, graph_src = 0, "--enforce-eager: no CUDA graphs"
    if graph is None:
        graph = 512 * MIB
        graph_src = "estimate: CUDA graphs (vLLM subtracts its profiled figure by default; 0 with --enforce-eager)"
    return act, act_src, over, over_src, graph, graph_src


def _gpu_memory(s: Any, notes: list[str]) -> tuple[str | None, int | None, str]:
    """The GPU's name, its total memory and where that figure comes from (--gpu, --gpu-memory)."""
    gpu_name, total, total_source = None, None, ""
    if s.gpu is not None:
        gpu = find_gpu(s.gpu)
        gpu_name, total, total_source = gpu.name, gpu.memory_bytes, f"catalog {gpu.name}: {gpu.source}"
        notes += _ambiguous_gpu(s.gpu, gpu)
    if s.gpu_memory is not None:
        total = parse_size(s.gpu_memory, named("gpu_memory"))
        total_source = "--gpu-memory"
        if total <= 0:
            raise PlanError(f"{named('gpu_memory')} must be larger than 0")
    return gpu_name, total, total_source


def _stages(weights: tuple[int, ...], src: str, requested: int, util: float, total: int, head: tuple,
            rest: list[tuple[str, int, str]]) -> tuple[list[int], list[tuple]]:
    """Per PP stage: the KV memory left after its weights and the other terms, and the terms."""
    available, terms = [], []
    for stage, w in enumerate(weights):
        if w > requested:
            raise PlanError(
                f"weights on one GPU of PP stage {stage} ({format_bytes(w)}, {src.split(':')[0]}) exceed the memory vLLM may "
                f"use ({format_bytes(requested)} = {util} x {format_bytes(total)}); use more GPUs ({named('tp')}/{named('pp')}), a larger GPU "
                f"or a higher {named('gpu_memory_utilization')}"
            )
        kv = requested - w - sum(b for _, b, _ in rest)
        available.append(kv)
        terms.append((*head, BudgetTerm(f"- weights on this GPU (stage {stage})", w, src),
                      *(BudgetTerm(n, b, why) for n, b, why in rest), BudgetTerm("= KV cache memory per GPU", kv, "derived")))
    return available, terms


def budget_inputs(
    model: ModelSpec,
    s: Any,  # kvcalc.app.service.Settings
    plan: ParallelPlan,
    cache: CacheSettings,
    max_model_len: int,
    version: str,
    checkpoint: dict | None,
) -> PoolInputs:
    notes: list[str] = []
    gpu_name, total, total_source = _gpu_memory(s, notes)
    util = DEFAULT_UTILIZATION if s.gpu_memory_utilization is None else s.gpu_memory_utilization
    if isinstance(util, bool) or not isinstance(util, (int, float)) or not (0 < util <= 1) or util != util:
        raise PlanError(f"{named('gpu_memory_utilization')} must be in (0, 1], got {util!r}")
    util = float(util)

    if s.max_num_batched_tokens is not None:
        if s.max_num_batched_tokens < 1:
            raise PlanError(f"{named('max_num_batched_tokens')} must be a positive integer, got {s.max_num_batched_tokens}")
        mnbt, mnbt_src = s.max_num_batched_tokens, "--max-num-batched-tokens"
    else:
        mnbt, mnbt_src = default_max_num_batched_tokens(total, gpu_name, version, max_model_len)
    mcb, mcb_src = max_concurrent_batches(plan.pp, version, s.max_concurrent_batches)
    override = s.num_gpu_blocks_override
    if override is not None and (isinstance(override, bool) or not isinstance(override, int) or override < 1):
        raise PlanError(f"{named('num_gpu_blocks_override')} must be a positive integer, got {override!r}")

    common = dict(
        vllm_version=version,
        max_model_len=max_model_len,
        max_num_batched_tokens=mnbt,
        max_num_batched_tokens_source=mnbt_src,
        max_concurrent_batches=mcb,
        max_concurrent_batches_source=mcb_src,
        gpu_name=gpu_name,
        gpu_memory_bytes=total,
        num_gpu_blocks_override=override,
        disable_hybrid=bool(s.disable_hybrid_kv_cache_manager),
    )
    kv_mem = _size(s.kv_cache_memory, named("kv_cache_memory"))
    if kv_mem is not None:
        if kv_mem <= 0:
            raise PlanError(f"{named('kv_cache_memory')} must be larger than 0")
        terms = tuple((BudgetTerm("KV cache memory per GPU", kv_mem, "--kv-cache-memory (budget bypassed)"),) for _ in range(plan.pp))
        notes.append("--kv-cache-memory set: gpu_memory_utilization and the profiled terms are ignored, as vLLM does")
        return PoolInputs(
            available_per_stage=(kv_mem,) * plan.pp, terms=terms, kv_cache_memory_given=True, notes=tuple(notes), **common
        )
    if total is None:
        if override is not None:
            terms = tuple((BudgetTerm("KV cache memory per GPU", 0, "--num-gpu-blocks-override decides"),) for _ in range(plan.pp))
            return PoolInputs(available_per_stage=(0,) * plan.pp, terms=terms, notes=tuple(notes), **common)
        raise PlanError(f"the pool needs {named('gpu')}, {named('gpu_memory')} or {named('kv_cache_memory')}")

    requested = math.ceil(total * util)  # vLLM request_memory: ceil(total x utilization)
    weights, src = _weights(model, s, plan, checkpoint)
    act, act_src, over, over_src, graph, graph_src = _engine_terms(model, s, plan, cache, mnbt)
    if version == "0.20":
        notes.append("vLLM 0.20 profiled weights + torch peak + non-torch memory; 0.33 measures the free-memory delta: the same terms here")

    rows = [(BudgetTerm("GPU memory", total, total_source),
             BudgetTerm(f"requested = ceil(total x {util})", requested,
                        "--gpu-memory-utilization" if s.gpu_memory_utilization is not None else "vLLM default 0.92"))]
    available, stage_terms = _stages(weights, src, requested, util, total, rows[0],
                               [("- activation peak", act, act_src), ("- non-torch memory", over, over_src),
                                ("- CUDA graphs", graph, graph_src)])
    return PoolInputs(
        available_per_stage=tuple(available),
        terms=tuple(stage_terms),
        gpu_memory_utilization=util,
        requested_bytes=requested,
        weights_bytes_per_stage=tuple(weights),
        activation_bytes=act,
        overhead_bytes=over,
        cudagraph_bytes=graph,
        notes=tuple(notes),
        **common,
    )
