"""SGLang's pool from Settings: the release line, its server_args defaults, the two free-memory
figures it sizes from (before and after the weights), and the pool itself.

Imported only with ``--engine sglang`` (start-up of the vLLM path does not grow).
"""

from __future__ import annotations

from typing import Any

from kvcalc.app.budget_gpu import catalog_gpu, gpu_total, optional_size
from kvcalc.app.settings import Settings
from kvcalc.app.weights_budget import weights_per_stage
from kvcalc.core.dtypes import MODEL_DTYPES
from kvcalc.core.footprint import CacheSettings, stage_specs
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan
from kvcalc.core.pool import BudgetTerm
from kvcalc.core.record import replace
from kvcalc.core.sglang import (
    GIB,
    MIB,
    Line,
    chunked_prefill_default,
    cuda_graph_max_bs_default,
    mem_fraction_static_default,
    parse_release,
    rope_cache_bytes,
    rules_for,
    state_dtype_bytes,
)
from kvcalc.core.sglang_pool import SglangInputs, SglangPool, sglang_pool
from kvcalc.core.units import figure, parse_size
from kvcalc.errors import PlanError, named

# kvcalc dtype names SGLang's --kv-cache-dtype accepts (auto is the model dtype, as vLLM)
SGLANG_KV_DTYPES = ("auto", "bfloat16", "float16", "fp8_e4m3", "fp8_e5m2", "fp8")
# vLLM-only settings: ignored, with a note, under --engine sglang
VLLM_ONLY = (
    "gpu_memory_utilization", "num_gpu_blocks_override", "max_num_batched_tokens", "max_concurrent_batches",
    "disable_hybrid_kv_cache_manager", "attention_backend", "activation_bytes", "cudagraph_bytes", "compile_cache", "limit_mm_per_prompt",
    "enable_lora", "max_loras", "max_lora_rank", "enable_expert_parallel", "usage_context", "language_model_only",
    "mamba_cache_mode", "enable_prefix_caching",
)
SGLANG_ONLY = (
    "mem_fraction_static", "max_total_tokens", "max_running_requests", "chunked_prefill_size", "enable_dp_attention",
    "free_before_weights", "free_after_weights",
)


def engine_of(s: Settings) -> str:
    e = str(s.engine).strip().lower()
    if e not in ("vllm", "sglang"):
        raise PlanError(f"{named('engine')} {s.engine!r} is not known; valid: vllm, sglang")
    return e


def ignored_notes(s: Settings, engine: str) -> list[str]:
    """Settings of the other engine: ignored, said once each."""
    names = VLLM_ONLY if engine == "sglang" else SGLANG_ONLY
    other = "a vLLM" if engine == "sglang" else "an SGLang"
    out = []
    for n in names:
        v = getattr(s, n)
        if v is not None and v is not False:
            out.append(f"--{n.replace('_', '-')} is {other} setting: ignored under --engine {engine}")
    return out


def kv_dtype_name(s: Settings) -> str:
    key = str(s.kv_dtype).strip().lower()
    if key not in SGLANG_KV_DTYPES:
        raise PlanError(f"{named('kv_dtype')} {s.kv_dtype!r} is not an SGLang --kv-cache-dtype; valid: auto, bfloat16, fp8_e4m3, fp8_e5m2")
    return {"fp8": "fp8_e4m3"}.get(key, key)


def attention_plan(s: Settings, plan: ParallelPlan) -> tuple[ParallelPlan, int]:
    """The plan SGLang shards attention over, and the DP-attention ranks in the TP group."""
    if not s.enable_dp_attention:
        return plan, 1
    dp = plan.dp
    if plan.tp % dp:
        raise PlanError(f"{named('dp')} {dp} must divide {named('tp')} {plan.tp} with {named('enable_dp_attention')}")
    return replace(plan, tp=plan.tp // dp, dp=1), dp


def _free_memory(
    s: Settings, model: ModelSpec, plan: ParallelPlan, total: int | None, checkpoint: dict | None, gpu_name: str | None
) -> tuple[int | None, str, int | None, str, tuple[int, ...], str, tuple[int, str]]:
    """P and A (free bytes before/after the weights) with their sources, the weights per stage, and what
    else the load leaves on the GPU when A is estimated (the RoPE table; 0 when A is given)."""
    before = parse_size(s.free_before_weights, named("free_before_weights")) if s.free_before_weights is not None else None
    after = parse_size(s.free_after_weights, named("free_after_weights")) if s.free_after_weights is not None else None
    weights, w_src = weights_per_stage(s, model, plan, checkpoint, vllm_extras=False)
    b_src = "--free-before-weights (SGLang's 'Load weight begin. avail mem=')"
    if before is None and total is not None:
        over, over_src = _preload_overhead(s, plan)
        before, b_src = total - over, f"GPU memory - memory in use before the weights ({over_src})"
    a_src = "--free-after-weights (SGLang's 'Load weight end. avail mem=')"
    rope: tuple[int, str] = (0, "")
    if after is None and before is not None:
        # a catalog GPU that is not NVIDIA's has sm 0; one given by its memory alone (or auto) is taken as CUDA
        gpu = catalog_gpu(s, gpu_name)
        nvidia = gpu is None or gpu.sm > 0
        rope = rope_cache_bytes(model.arch, model.head_dim, model.mla, MODEL_DTYPES.get(model.dtype, 2),
                                parse_release(str(s.sglang_version)), nvidia)
        after = before - max(weights) - rope[0]
        a_src = f"free before weights - weights on the GPU ({w_src}) - {rope[1]}"
    return before, b_src, after, a_src, weights, w_src, rope


def _preload_overhead(s: Settings, plan: ParallelPlan) -> tuple[int, str]:
    """Memory in use when SGLang measures P: CUDA context, cuBLAS, NCCL and custom all-reduce buffers."""
    given = optional_size(s.overhead_bytes, named("overhead_bytes"))
    if given is not None:
        return given, "--overhead-bytes"
    ranks = plan.tp * plan.pp
    over = 3 * GIB if ranks >= 8 else 870 * MIB
    return over, (
        f"estimate: {figure(over)} in use before the weights ({'8+' if ranks >= 8 else 'up to 4'} ranks; the pre-load "
        "figures of public SGLang launch logs); pass --overhead-bytes or --free-before-weights"
    )


def _terms(i: SglangInputs, b_src: str, a_src: str, w_src: str, rope: tuple[int, str]) -> tuple:
    if i.kv_cache_memory is not None:
        return ((BudgetTerm("KV pool per GPU (K + V)", i.kv_cache_memory, "--kv-cache-memory (budget bypassed)"),),)
    p, a, mfs = i.free_before or 0, i.free_after or 0, i.mem_fraction_static or 0.0
    rows: list[BudgetTerm] = []
    if i.gpu_memory_bytes is not None:
        rows.append(BudgetTerm("GPU memory", i.gpu_memory_bytes, f"catalog {i.gpu_name}" if i.gpu_name else "--gpu-memory"))
    load = [BudgetTerm("- weights on this GPU", p - a - rope[0], w_src if a_src.startswith("free before") else "P - A (as logged)")]
    if rope[0]:
        load.append(BudgetTerm("- RoPE cos/sin table (built on the GPU at load)", rope[0], rope[1]))
    rows += [
        BudgetTerm("P = free before weights (min over ranks)", p, b_src),
        *load,
        BudgetTerm("A = free after weights", a, a_src),
        BudgetTerm(f"- P x (1 - mem_fraction_static {mfs:g}): activations, CUDA graphs", a - (i.budget_bytes or 0),
                   i.mem_fraction_static_source),
        BudgetTerm("= rest for the KV pool", i.budget_bytes or 0, "derived: int((A - P x (1 - mfs)) GiB x 2^30)"),
    ]
    return (tuple(rows),)


def sglang_inputs(
    model: ModelSpec, s: Settings, plan: ParallelPlan, context_len: int, checkpoint: dict | None
) -> tuple[SglangInputs, Line]:
    line, rules = rules_for(str(s.sglang_version))
    attn, dp = attention_plan(s, plan)
    gpu_name, total, _src = gpu_total(s)
    gpu_mib = total // MIB if total is not None else None
    if s.chunked_prefill_size is not None:
        chunk, chunk_src = int(s.chunked_prefill_size), "--chunked-prefill-size"
    else:
        chunk = chunked_prefill_default(line, gpu_mib, dp, bool(s.enable_dp_attention))
        chunk_src = f"SGLang {line.label} default for " + (f"{gpu_mib} MiB" if gpu_mib else "an unknown GPU")
    kv_mem = parse_size(s.kv_cache_memory, named("kv_cache_memory")) if s.kv_cache_memory is not None else None
    if kv_mem is not None and kv_mem <= 0:
        raise PlanError(f"{named('kv_cache_memory')} must be larger than 0")
    before, b_src, after, a_src, weights, w_src, rope = _free_memory(s, model, plan, total, checkpoint, gpu_name)
    if s.mem_fraction_static is not None:
        mfs, mfs_src = _fraction(s.mem_fraction_static), "--mem-fraction-static"
    else:
        graph = cuda_graph_max_bs_default(line, gpu_mib, plan.tp)
        mfs, mfs_src = mem_fraction_static_default(
            line, gpu_mib, tp=plan.tp, pp=plan.pp, dp=dp, dp_attention=bool(s.enable_dp_attention),
            chunk=chunk, graph_bs=graph, mla=model.mla,
        )
        if line.rest_error:
            mfs_src += (f" (0.5.10's formula; SGLang {line.label} sizes the graph reserve from its graph configs: "
                        "take mem_fraction_static from its server_args line)")
    page = int(s.block_size) if s.block_size is not None else 1
    if page < 1:
        raise PlanError(f"{named('block_size')} must be a positive integer, got {page}")
    i = SglangInputs(
        sglang_version=str(s.sglang_version), line=line, rules=rules, context_len=context_len, page_size=page,
        chunked_prefill_size=chunk, chunked_prefill_size_source=chunk_src, kv_dtype=kv_dtype_name(s),
        free_before=before, free_after=after, mem_fraction_static=mfs, mem_fraction_static_source=mfs_src,
        kv_cache_memory=kv_mem, max_total_tokens=s.max_total_tokens, max_running_requests=s.max_running_requests,
        dp=dp, dp_attention=bool(s.enable_dp_attention), gpu_name=gpu_name, gpu_memory_bytes=total,
        weights_bytes_per_stage=weights,
    )
    return replace(i, terms=_terms(i, b_src, a_src, w_src, rope)), line


def _fraction(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= 1) or v != v:
        raise PlanError(f"{named('mem_fraction_static')} must be in (0, 1], got {v!r}")
    return float(v)


def sglang_report(
    model: ModelSpec, s: Settings, plan: ParallelPlan, cache: CacheSettings, context_len: int, checkpoint: dict | None
) -> SglangPool:
    """SGLang's pool for the settings: its line's rules on kvcalc's per-layer specs."""
    i, line = sglang_inputs(model, s, plan, context_len, checkpoint)
    i = replace(i, kv_dtype=cache.kv_dtype.name)
    attn, _dp = attention_plan(s, plan)
    conv, ssm = state_dtype_bytes(line, model.arch.get("mamba_ssm_dtype"))
    stages = stage_specs(model, attn, replace(cache, block_size=1, mamba_dtype_bytes=conv, mamba_ssm_dtype_bytes=ssm))
    pool = sglang_pool(model, plan, stages, i)
    notes = [i.rules]
    if model.kinds and any(k in ("sliding", "chunked") for k in model.kinds) and pool.swa_tokens is None:
        notes.append("SGLang keeps every sliding-window layer at full length for this model and release")
    if i.dp_attention:
        notes.append(f"DP attention: {i.dp} attention ranks of TP {attn.tp} in the TP group, each with its own pool")
    if pool.cell.mamba_state:
        notes.append(f"mamba state pool: {pool.mamba_cache_size} requests (mamba_full_memory_ratio {i.mamba_full_memory_ratio})")
    return replace(pool, notes=tuple(notes) + pool.notes)
