"""The memory budget per GPU: every term with its source (a flag, the GPU catalog, the
checkpoint's metadata, or an estimate from the config), turned into the KV memory each
PP stage's workers have (vLLM ``gpu_worker.determine_available_memory``)."""

from __future__ import annotations

import math
from typing import Any

from kvcalc.app.settings import Settings
from kvcalc.core.engine import default_max_num_batched_tokens, max_concurrent_batches
from kvcalc.core.footprint import CacheSettings
from kvcalc.core.gpus import find_gpu
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan
from kvcalc.core.pool import BudgetTerm, PoolInputs
from kvcalc.core.units import format_bytes, parse_size
from kvcalc.core.vllm_rules import CURRENT, RuleLine, rules_for
from kvcalc.core.weights import arch_int, estimate_weights
from kvcalc.errors import PlanError, named

MIB = 1 << 20
DEFAULT_UTILIZATION = 0.92


def _size(value: Any, flag: str) -> int | None:
    return None if value is None else parse_size(value, flag)


def _gpu_total(s: Settings) -> tuple[str | None, int | None, str]:
    """The GPU's name, its total memory and where the figure comes from."""
    gpu_name, total, source = None, None, ""
    if s.gpu is not None:
        gpu = find_gpu(s.gpu)
        gpu_name, total, source = gpu.name, gpu.memory_bytes, f"catalog {gpu.name}: {gpu.source}"
    if s.gpu_memory is not None:
        total = parse_size(s.gpu_memory, named("gpu_memory"))
        source = "--gpu-memory"
        if total <= 0:
            raise PlanError(f"{named('gpu_memory')} must be larger than 0")
    return gpu_name, total, source


def _utilization(s: Settings) -> float:
    util = DEFAULT_UTILIZATION if s.gpu_memory_utilization is None else s.gpu_memory_utilization
    if isinstance(util, bool) or not isinstance(util, (int, float)) or not (0 < util <= 1) or util != util:
        raise PlanError(f"{named('gpu_memory_utilization')} must be in (0, 1], got {util!r}")
    return float(util)


def _scheduler(
    s: Settings, plan: ParallelPlan, total: int | None, gpu_name: str | None, version: str, max_model_len: int,
    rules: tuple[RuleLine, str],
    encoder_decoder: bool = False,
) -> dict[str, Any]:
    """What the pool's inputs take from the scheduler: batched tokens, batches in flight, overrides."""
    if s.max_num_batched_tokens is not None:
        if s.max_num_batched_tokens < 1:
            raise PlanError(f"{named('max_num_batched_tokens')} must be a positive integer, got {s.max_num_batched_tokens}")
        mnbt, mnbt_src = s.max_num_batched_tokens, "--max-num-batched-tokens"
    else:
        mnbt, mnbt_src = default_max_num_batched_tokens(
            total, gpu_name, rules[0], max_model_len, chunked_prefill=not encoder_decoder
        )
    mcb, mcb_src = max_concurrent_batches(plan.pp, rules[0], s.max_concurrent_batches)
    override = s.num_gpu_blocks_override
    if override is not None and (isinstance(override, bool) or not isinstance(override, int) or override < 1):
        raise PlanError(f"{named('num_gpu_blocks_override')} must be a positive integer, got {override!r}")
    return dict(
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
        rules=rules[0],
        rules_note=rules[1],
    )


def _weights(s: Settings, model: ModelSpec, plan: ParallelPlan, checkpoint: dict | None) -> tuple[tuple[int, ...], str]:
    """Weights on one GPU of each PP stage, and their source."""
    est = estimate_weights(model, plan)
    weights_flag = _size(s.weights_bytes, named("weights_bytes"))
    if weights_flag is None and not (checkpoint and checkpoint.get("bytes")):
        return est.bytes_per_stage, f"{est.method}: {est.parameters:,} parameters (pass --weights-bytes for the exact figure)"
    if weights_flag is not None:
        whole, src = weights_flag, "--weights-bytes"
    else:
        assert checkpoint is not None  # the condition above
        whole, src = int(checkpoint["bytes"]), f"checkpoint metadata ({checkpoint.get('source', 'safetensors')})"
    est_total = sum(est.bytes_per_stage) * plan.tp or 1
    weights = tuple(round(whole * b / est_total) for b in est.bytes_per_stage)
    if plan.world_size // plan.dp > 1:
        src += ", split across ranks in the estimate's proportions"
    return weights, src


def _activation(s: Settings, model: ModelSpec, plan: ParallelPlan, cache: CacheSettings, mnbt: int) -> tuple[int, str]:
    act = _size(s.activation_bytes, named("activation_bytes"))
    if act is not None:
        return act, "--activation-bytes"
    a = model.arch
    h = arch_int(a, "hidden_size") or arch_int(a, "d_model")
    inter = arch_int(a, "intermediate_size") or arch_int(a, "moe_intermediate_size") or 4 * h
    vocab = arch_int(a, "vocab_size")
    dt = cache.mamba_dtype_bytes
    act = mnbt * (4 * h + 2 * inter // plan.tp) * dt + 256 * vocab // plan.tp * 4
    return act, (
        "estimate: max_num_batched_tokens x (4 x hidden + 2 x intermediate / TP) x dtype + 256 sequences of fp32 "
        "logits (vLLM profiles the real peak; pass --activation-bytes from its log)"
    )


def _overhead(s: Settings, plan: ParallelPlan) -> tuple[int, str]:
    over = _size(s.overhead_bytes, named("overhead_bytes"))
    if over is not None:
        return over, "--overhead-bytes"
    over = 512 * MIB + (256 * MIB if plan.tp * plan.pp > 1 else 0)
    return over, "estimate: CUDA context 512 MiB (+256 MiB NCCL buffers when TP x PP > 1); pass --overhead-bytes"


def _cudagraphs(s: Settings) -> tuple[int, str]:
    graph = _size(s.cudagraph_bytes, named("cudagraph_bytes"))
    if graph is not None:
        return graph, "--cudagraph-bytes"
    return 512 * MIB, "estimate: CUDA graphs 512 MiB (vLLM subtracts its profiled figure by default; 0 with --enforce-eager)"


def _kv_memory_per_stage(s: Settings, plan: ParallelPlan) -> tuple[int, ...] | None:
    """--kv-cache-memory: one figure for every GPU, or one per PP stage ("12.13GiB,11.33GiB":
    real PP logs show a different available memory on each stage)."""
    if s.kv_cache_memory is None:
        return None
    parts = str(s.kv_cache_memory).split(",") if isinstance(s.kv_cache_memory, str) else [s.kv_cache_memory]
    if len(parts) not in (1, plan.pp):
        raise PlanError(
            f"{named('kv_cache_memory')} gives {len(parts)} figures for {plan.pp} PP stage(s); give one, or one per stage"
        )
    sizes = tuple(parse_size(p.strip() if isinstance(p, str) else p, named("kv_cache_memory")) for p in parts)
    if any(m <= 0 for m in sizes):
        raise PlanError(f"{named('kv_cache_memory')} must be larger than 0")
    return sizes * plan.pp if len(sizes) == 1 else sizes


def _bypass(s: Settings, plan: ParallelPlan, total: int | None, common: dict[str, Any]) -> PoolInputs | None:
    """The pool's inputs when --kv-cache-memory or --num-gpu-blocks-override decide alone."""
    per_stage = _kv_memory_per_stage(s, plan)
    if per_stage is not None:
        terms = tuple((BudgetTerm("KV cache memory per GPU", m, "--kv-cache-memory (budget bypassed)"),) for m in per_stage)
        note = "--kv-cache-memory set: gpu_memory_utilization and the profiled terms are ignored, as vLLM does"
        return PoolInputs(available_per_stage=per_stage, terms=terms, kv_cache_memory_given=True, notes=(note,), **common)
    if total is None:
        if common["num_gpu_blocks_override"] is not None:
            terms = tuple((BudgetTerm("KV cache memory per GPU", 0, "--num-gpu-blocks-override decides"),) for _ in range(plan.pp))
            return PoolInputs(available_per_stage=(0,) * plan.pp, terms=terms, notes=(), **common)
        raise PlanError(f"the pool needs {named('gpu')}, {named('gpu_memory')} or {named('kv_cache_memory')}")
    return None


def budget_inputs(
    model: ModelSpec,
    s: Settings,
    plan: ParallelPlan,
    cache: CacheSettings,
    max_model_len: int,
    version: str,
    checkpoint: dict | None,
    rules: tuple[RuleLine, str] | None = None,
) -> PoolInputs:
    if rules is None:
        rules = rules_for(version)
    gpu_name, total, total_source = _gpu_total(s)
    util = _utilization(s)
    common = _scheduler(s, plan, total, gpu_name, version, max_model_len, rules, model.encoder_decoder)
    bypass = _bypass(s, plan, total, common)
    if bypass is not None:
        return bypass
    assert total is not None  # _bypass answers when there is no total
    requested = math.ceil(total * util)  # vLLM request_memory: ceil(total x utilization)
    weights, src = _weights(s, model, plan, checkpoint)
    act, act_src = _activation(s, model, plan, cache, common["max_num_batched_tokens"])
    over, over_src = _overhead(s, plan)
    graph, graph_src = _cudagraphs(s)
    notes: list[str] = []
    if rules[0] is not CURRENT:
        notes.append(f"vLLM {rules[0].label} profiled weights + torch peak + non-torch memory; 0.33 measures the free-memory delta: the same terms here")
    util_src = "--gpu-memory-utilization" if s.gpu_memory_utilization is not None else "vLLM default 0.92"
    available, terms = [], []
    for stage, w in enumerate(weights):
        if w > requested:
            raise PlanError(
                f"weights on one GPU of PP stage {stage} ({format_bytes(w)}, {src.split(':')[0]}) exceed the memory vLLM may "
                f"use ({format_bytes(requested)} = {util} x {format_bytes(total)}); use more GPUs ({named('tp')}/{named('pp')}), a larger GPU "
                f"or a higher {named('gpu_memory_utilization')}"
            )
        kv = requested - w - act - over - graph
        available.append(kv)
        terms.append(
            (
                BudgetTerm("GPU memory", total, total_source),
                BudgetTerm(f"requested = ceil(total x {util})", requested, util_src),
                BudgetTerm(f"- weights on this GPU (stage {stage})", w, src),
                BudgetTerm("- activation peak", act, act_src),
                BudgetTerm("- non-torch memory", over, over_src),
                BudgetTerm("- CUDA graphs", graph, graph_src),
                BudgetTerm("= KV cache memory per GPU", kv, "derived"),
            )
        )
    return PoolInputs(
        available_per_stage=tuple(available),
        terms=tuple(terms),
        gpu_memory_utilization=util,
        requested_bytes=requested,
        weights_bytes_per_stage=tuple(weights),
        activation_bytes=act,
        overhead_bytes=over,
        cudagraph_bytes=graph,
        notes=tuple(notes),
        **common,
    )
