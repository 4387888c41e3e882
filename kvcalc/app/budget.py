"""The memory budget per GPU: every term with its source (a flag, the GPU catalog, the
checkpoint's metadata, or an estimate from the config), turned into the KV memory each
PP stage's workers have (vLLM ``gpu_worker.determine_available_memory``)."""

from __future__ import annotations

import math
from typing import Any

from kvcalc.app.budget_gpu import ambiguous_gpu, catalog_gpu, gpu_total, optional_size
from kvcalc.app.cudagraph_budget import cudagraph_term
from kvcalc.app.lora_budget import with_lora
from kvcalc.app.mm_encoder import encoder_term
from kvcalc.app.runner import effective_line, model_runner_v2, v2_by_default
from kvcalc.app.settings import Settings
from kvcalc.app.weights_budget import quantization, weights_per_stage
from kvcalc.core.budget_device import non_torch
from kvcalc.core.budget_rules import (
    COMPILE_CACHES,
    DEFAULT_SM_COUNT,
    FLASHINFER_ROW_STATES,
    PP_INTERMEDIATE_KEYS,
    SAMPLERS,
    TRITON_TOPK_MIN_ROWS,
    V2_DUMMY_SAMPLER_BYTES,
    V2_WARMUP_FLASHINFER_BYTES,
    V2_WARMUP_TRITON_BYTES,
    Shapes,
    compile_examples,
    default_max_num_seqs,
    flashinfer_sampler,
    forward_per_token,
    fp8_marlin,
    fp8_mlp_activation,
    moe_workspace,
    pp_intermediate_buffers,
    profile_peak,
    sampler_bytes_per_element,
    topk_sm_buffer,
    v2_gumbel_tables,
    v2_sampler_state,
)
from kvcalc.core.engine import default_max_num_batched_tokens, max_concurrent_batches
from kvcalc.core.footprint import CacheSettings
from kvcalc.core.gpus import Gpu
from kvcalc.core.mixers import EXPERT_KEYS
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan
from kvcalc.core.pool import BudgetTerm, PoolInputs
from kvcalc.core.quant import bnb_4bit, forced_awq, mxfp4_kernel, workspace_kernel
from kvcalc.core.units import figure, format_bytes, parse_size
from kvcalc.core.vllm_rules import SAMPLER_V2_DUMMY, SAMPLER_V2_WARMUP, RuleLine, parse_release, rules_for
from kvcalc.core.weights import arch_int
from kvcalc.errors import PlanError, named

MIB = 1 << 20
# How close the budget before launch has come on vLLM starts kvcalc had not seen: held-out sets 6-47, each predicted
# with the code of its day (docs/budget.md's table; tests/test_budget_calibration.py reads these against it)
HELD_OUT_WITHIN, HELD_OUT_RUNS = 116, 182


def _accuracy(s: Settings) -> str:
    """What the derived figure is worth when any term is kvcalc's own estimate, and how to make it exact."""
    if None not in (s.weights_bytes, s.activation_bytes, s.overhead_bytes, s.cudagraph_bytes):
        return ""
    return (
        f"; an estimate before launch: {HELD_OUT_WITHIN} of {HELD_OUT_RUNS} public vLLM starts held out from kvcalc came "
        f"within max(2 %, {figure(1 << 28)}) of vLLM's figure (docs/budget.md); --kv-cache-memory takes the figure vLLM logs"
    )


def _utilization(s: Settings, line: RuleLine) -> tuple[float, str]:
    if s.gpu_memory_utilization is None:
        return line.default_utilization, f"vLLM {line.label} default {line.default_utilization}"
    util = s.gpu_memory_utilization
    if isinstance(util, bool) or not isinstance(util, (int, float)) or not (0 < util <= 1) or util != util:
        raise PlanError(f"{named('gpu_memory_utilization')} must be in (0, 1], got {util!r}")
    return float(util), "--gpu-memory-utilization"


def _scheduler(
    s: Settings, plan: ParallelPlan, total: int | None, gpu_name: str | None, version: str, max_model_len: int,
    rules: tuple[RuleLine, str], encoder_decoder: bool = False,
) -> dict[str, Any]:
    """What the pool's inputs take from the scheduler: batched tokens, batches in flight, overrides."""
    if s.max_num_batched_tokens is not None:
        if s.max_num_batched_tokens < 1:
            raise PlanError(f"{named('max_num_batched_tokens')} must be a positive integer, got {s.max_num_batched_tokens}")
        mnbt, mnbt_src = s.max_num_batched_tokens, "--max-num-batched-tokens"
    else:
        mnbt, mnbt_src = default_max_num_batched_tokens(
            total, gpu_name, rules[0], max_model_len, chunked_prefill=not encoder_decoder, usage=s.usage_context
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


def _shapes(model: ModelSpec, dtype_bytes: int, s: Settings, sm: int) -> Shapes:
    a, quant = model.arch, quantization(s)
    fp8_act = fp8_mlp_activation(a, quant, sm, not s.enforce_eager)
    h = arch_int(a, "hidden_size", "d_model", "n_embd")
    experts = arch_int(a, *EXPERT_KEYS)
    dense = arch_int(a, "intermediate_size", "ffn_dim", "d_ff", "n_inner")
    return Shapes(
        hidden=h,
        intermediate=dense if (dense or experts) else 4 * h,
        moe_intermediate=arch_int(a, "moe_intermediate_size", "intermediate_size") if experts else 0,
        experts=experts,
        top_k=arch_int(a, "num_experts_per_tok", "experts_per_token", "moe_topk", "top_k", default=2) if experts else 0,
        q_width=model.num_attention_heads * model.head_dim,
        kv_width=model.num_kv_heads * (model.head_dim + model.head_dim_v) // 2,
        vocab=arch_int(a, "vocab_size"),
        dtype_bytes=dtype_bytes,
        experts_sliced=not s.enable_expert_parallel, mlp_act_bytes=1 if fp8_act else 0,
        awq_dequant=forced_awq(a, quant), bnb_dequant=bnb_4bit(a, quant),
    )


def _max_num_seqs(s: Settings, line: RuleLine, total: int | None, gpu_name: str | None) -> tuple[int, str]:
    if s.max_num_seqs is not None:
        if isinstance(s.max_num_seqs, bool) or not isinstance(s.max_num_seqs, int) or s.max_num_seqs < 1:
            raise PlanError(f"{named('max_num_seqs')} must be a positive integer, got {s.max_num_seqs!r}")
        return s.max_num_seqs, "--max-num-seqs"
    return default_max_num_seqs(line, total, gpu_name, s.usage_context)


def _activation(
    s: Settings, line: RuleLine, model: ModelSpec, shapes: Shapes, plan: ParallelPlan, mnbt: int, seqs: tuple[int, str],
    stage: int, gpu: Gpu | None = None,
) -> tuple[int, str]:
    """torch peak increase of vLLM's profile_run on one GPU of PP stage ``stage``."""
    act = optional_size(s.activation_bytes, named("activation_bytes"))
    if act is not None:
        return act, "--activation-bytes"
    if s.sampler is not None and s.sampler not in SAMPLERS:
        raise PlanError(f"{named('sampler')} {s.sampler!r} is not known; valid: {', '.join(SAMPLERS)}")
    v2 = v2_by_default(line, model, s)
    resident, resident_how = _pp_buffers(line, shapes, mnbt, stage, line.v2_for_all or bool(v2))
    examples = _compile_examples(s, line, model, shapes, plan, mnbt, stage)
    if stage < plan.pp - 1:  # the dummy sampler runs on the last PP rank only
        per_token, which = forward_per_token(shapes, plan.tp)
        if examples[0] > mnbt * per_token + resident:
            return examples[0], f"estimate: {examples[1]} = {figure(examples[0])} > forward over {mnbt} tokens"
        return mnbt * per_token + resident, (
            f"estimate: forward over {mnbt} tokens ({which}){resident_how}; the sampler runs on the last PP stage"
        )
    # model runner V2's dummy run applies no top-k/top-p (0.22-0.32), so a named top-k/top-p path changes nothing there
    unused = s.sampler in ("native", "flashinfer", "triton") and (bool(v2) or line.sampler_path == SAMPLER_V2_DUMMY)
    # 0.33's V2 warm-up pass takes FlashInfer or the Triton kernel, never PyTorch's sort while Triton exists
    unused_native = s.sampler == "native" and line.sampler_path == SAMPLER_V2_WARMUP
    unused = unused or unused_native
    sampler = None if unused else s.sampler
    bpe, path = sampler_bytes_per_element(line, sampler, shapes.dtype_bytes)
    rows = min(mnbt, seqs[0])
    kept, kept_how = _moe_kept(s, model, shapes, plan, mnbt, line, gpu)
    scratch_name = "Triton top-k/top-p buffer"
    if v2 and sampler in (None, "auto"):  # RuleLine.v2_logits_fp32_copy: 0.22-0.25 copy the logits to fp32
        copy = line.v2_logits_fp32_copy
        bpe = V2_DUMMY_SAMPLER_BYTES + max(shapes.dtype_bytes - 2, 0) if copy else shapes.dtype_bytes
        held = "logits + fp32 copy" if copy else "logits in the model dtype"
        path = f"model runner V2 (vLLM {line.label} default for {v2}): {held}, no top-k/top-p in the dummy run"
        scratch, scratch_how = (0, "") if copy else v2_gumbel_tables(rows, shapes.vocab)
        scratch_name = "V2 Gumbel tables"
    elif line.sampler_path == SAMPLER_V2_DUMMY and sampler in (None, "auto"):
        scratch, scratch_how = v2_gumbel_tables(rows, shapes.vocab)
        scratch_name = "V2 Gumbel tables"
    elif line.sampler_path == SAMPLER_V2_WARMUP and sampler in (None, "auto", "flashinfer", "triton"):
        bpe, path, scratch, scratch_how, scratch_name = _v2_warmup(sampler, rows, shapes, gpu)
    else:
        scratch, scratch_how = _topk_scratch(s, line, rows, shapes.vocab, gpu)
    peak, how = profile_peak(shapes, plan.tp, mnbt, rows, bpe, kept, scratch, scratch_name, resident, examples)
    if model.drafter_method and not (line.v2_for_all or v2):  # V1: the rejection sampler's dry run after the sampler
        from kvcalc.app.speculation import rejection_dry_run

        dry = rejection_dry_run(parse_release(str(s.vllm_version)), rows, shapes.vocab, shapes.dtype_bytes)
        side = kept + mnbt * shapes.hidden * shapes.dtype_bytes + scratch + resident  # as in the sampler phase
        if dry is not None and dry[0] + side > peak:
            peak, how = dry[0] + side, f"{dry[1]} + {mnbt} retained hidden states{' + ' + scratch_name if scratch else ''} > {how}"
    if model.drafter_method and (line.v2_for_all or v2):  # model runner V2 runs the drafter inside the dummy run
        from kvcalc.app.speculation import drafter_pass

        phase = drafter_pass(model, lambda m: _shapes(m, shapes.dtype_bytes, s, 0), plan.tp, mnbt, shapes.dtype_bytes)
        if phase is not None and phase[0] + resident > peak:
            peak, how = phase[0] + resident, f"{phase[1]} > {how}"
    unused_how = "" if not unused else (
        "--sampler native not used: 0.33's sampler takes FlashInfer or the Triton kernel (ops/topk_topp_sampler.py:515-518)"
        if unused_native else f"--sampler {s.sampler} not used: model runner V2's dummy run applies no top-k/top-p"
    )
    notes = "".join(f"; {x}" for x in (kept_how, scratch_how, unused_how) if x)
    return peak, f"estimate: {how}; {path}; max_num_seqs {seqs[0]} ({seqs[1]}){notes}"


def _with_encoder(act: int, how: str, encoder: tuple[int, int, str]) -> tuple[int, str]:
    """The profile peak with the vision encoder's pass before the decoder's (app.mm_encoder): the larger
    of the encoder phase and the decoder's peak with the encoder's outputs still allocated."""
    phase, kept, what = encoder
    if phase > act + kept:
        return phase, f"{how}; the encoder pass is the peak: {what}"
    return act + kept, f"{how}; + {what}" if kept else f"{how}; {what}"


def _multimodal(model: ModelSpec) -> bool:
    """An encoder-decoder or multimodal model: an encoder profile pass kvcalc does not model, and the
    decoder's embeddings come in as inputs_embeds."""
    return model.encoder_decoder or any(k in model.arch for k in ("vision_config", "audio_config"))


def _compile_examples(
    s: Settings, line: RuleLine, model: ModelSpec, shapes: Shapes, plan: ParallelPlan, mnbt: int, stage: int
) -> tuple[int, str]:
    """A cold torch.compile's autotune examples inside the profile run (budget_rules.compile_examples),
    on the first PP stage, which holds the embedding. None with --enforce-eager (vllm==0.29.0:
    config/vllm.py:1370-1376 sets compilation mode NONE), with --compile-cache warm (the compiled
    artifacts are loaded, no kernel is autotuned), for models whose embeddings come in as inputs_embeds
    (multimodal, encoder-decoder: the embedding is outside the compiled graph), or where TP > 1 runs
    vLLM's fused embedding op (RuleLine.tp_embedding_fused)."""
    cache = s.compile_cache
    if cache is not None and cache not in COMPILE_CACHES:
        raise PlanError(f"{named('compile_cache')} {cache!r} is not known; valid: {', '.join(COMPILE_CACHES)}")
    if not line.compile_examples or s.enforce_eager or cache == "warm" or stage != 0:
        return 0, ""
    if _multimodal(model):
        return 0, ""
    if plan.tp > 1 and line.tp_embedding_fused:
        return 0, ""
    total, how = compile_examples(shapes, plan.tp, mnbt)
    src = "--compile-cache cold" if cache == "cold" else "a first launch; --compile-cache warm when it is cached"
    return total, f"{how} ({src})"


def _runner_state(
    line: RuleLine, model: ModelSpec, shapes: Shapes, plan: ParallelPlan, mnbt: int, seqs: int, stage: int, v2: bool
) -> tuple[int, str]:
    """What model runner V2 allocates in load_model after the weights' measurement and before the
    profile run, on one GPU of PP stage ``stage``: charged only where vLLM counts the free-memory
    delta (RuleLine.free_delta_accounting, 0.27+). The penalty state on the last stage
    (budget_rules.v2_sampler_state) and the PP receive buffers on every stage but the first
    (vllm==0.29.0: v1/worker/gpu/model_runner.py:480-489; 0.33.0: :542-551)."""
    if not (v2 and line.free_delta_accounting):
        return 0, ""
    total, parts = 0, []
    if stage > 0:
        buf = pp_intermediate_buffers(shapes, mnbt)
        total += buf
        parts.append(f"PP receive buffers {PP_INTERMEDIATE_KEYS} x {mnbt} x hidden {shapes.hidden} x {shapes.dtype_bytes} B = {figure(buf)}")
    if stage == plan.pp - 1:
        state, how = v2_sampler_state(shapes, seqs)
        total += state
        parts.append(how)
    return total, "; ".join(parts)


def _pp_buffers(line: RuleLine, shapes: Shapes, mnbt: int, stage: int, v2_runner: bool) -> tuple[int, str]:
    """The PP receive buffers charged to a stage's torch peak (budget_rules.pp_intermediate_buffers):
    on every stage but the first, with the V1 runner, which creates them in the profile run. Model
    runner V2 creates them in load_model, after the weights are measured and before the profiling
    window (vllm==0.29.0: v1/worker/gpu/model_runner.py:480-489; vllm==0.22.0: :319-328): in no torch
    peak; from 0.27 the free-memory delta counts them (_runner_state)."""
    if v2_runner:
        return 0, ""
    if stage == 0:
        return 0, "; the first PP rank allocates no receive buffers"
    buf = pp_intermediate_buffers(shapes, mnbt)
    return buf, f" + PP receive buffers {PP_INTERMEDIATE_KEYS} x {mnbt} x hidden {shapes.hidden} x {shapes.dtype_bytes} B = {figure(buf)}"


def _v2_warmup(sampler: str | None, rows: int, shapes: Shapes, gpu: Gpu | None) -> tuple[int, str, int, str, str]:
    """vLLM 0.33's second dummy sampler pass, with the warm-up sampling params (budget_rules.V2_WARMUP_*): bytes per
    element, the path, and what stays cached beside it (FlashInfer's row states, or the Triton buffer + Gumbel tables)."""
    extra = max(shapes.dtype_bytes - 2, 0)  # fp32 logits: 4 B, not 2
    if sampler in ("flashinfer", "triton"):
        fi, why = sampler == "flashinfer", f"--sampler {sampler}"
    else:
        fi, why = flashinfer_sampler(gpu.sm if gpu else None, gpu.sms if gpu else 0)
    head = f"model runner V2 (vLLM 0.33): a second pass with warm-up sampling params, logits + fp32 copy; {why}"
    if fi:
        return V2_WARMUP_FLASHINFER_BYTES + extra, f"{head}: FlashInfer's masked logits + probabilities (fp32)", (
            FLASHINFER_ROW_STATES
        ), "", "FlashInfer's row-states buffer"
    buffer, buffer_how = _sm_buffer(rows, shapes.vocab, gpu, 0)
    tables, tables_how = v2_gumbel_tables(rows, shapes.vocab)
    return V2_WARMUP_TRITON_BYTES + extra, f"{head}: Triton top-k/top-p in place, then Gumbel", buffer + tables, (
        f"{buffer_how}; {tables_how}"
    ), "Triton top-k/top-p buffer + V2 Gumbel tables"


def _topk_scratch(s: Settings, line: RuleLine, rows: int, vocab: int, gpu: Gpu | None) -> tuple[int, str]:
    """The Triton top-k/top-p buffer the dummy sampler run leaves cached: on the release lines
    whose default path is that kernel (RuleLine.topk_sm_buffer), or with --sampler triton."""
    if s.sampler not in (None, "auto"):
        if s.sampler != "triton":
            return 0, ""
    elif not line.topk_sm_buffer:
        return 0, ""
    return _sm_buffer(rows, vocab, gpu)


def _sm_buffer(rows: int, vocab: int, gpu: Gpu | None, min_rows: int = TRITON_TOPK_MIN_ROWS) -> tuple[int, str]:
    """The Triton top-k/top-p buffer on this GPU's SM count (the catalog's, else DEFAULT_SM_COUNT)."""
    if gpu is not None and gpu.sms:
        sms, whose = gpu.sms, f"{gpu.name}'s {gpu.sms} SMs (catalog)"
    else:
        sms = DEFAULT_SM_COUNT
        whose = (f"{gpu.name}'s SM count not in the catalog" if gpu else "no catalog GPU") + (
            f": assumed {DEFAULT_SM_COUNT} SMs (H100/H200 SXM)"
        )
    total, how = topk_sm_buffer(rows, vocab, sms, min_rows)
    return total, f"{how}; {whose}"


def _moe_kept(
    s: Settings, model: ModelSpec, shapes: Shapes, plan: ParallelPlan, mnbt: int, line: RuleLine, gpu: Gpu | None
) -> tuple[int, str]:
    """The fused-MoE workspace left under the dummy sampler run: TritonExperts' shapes, for the unquantized CUDA path
    (vllm==0.19.0 fused_moe/oracle/unquantized.py:176, :243-253) and quantized experts on Marlin or Triton (workspace_kernel);
    other kernels (MXFP4 on sm90+: monolithic Triton without the workspace manager, oracle/mxfp4.py:103-110) not."""
    if not shapes.experts:
        return 0, ""
    q = qc if isinstance(qc := model.arch.get("quantization_config"), dict) else {}
    method = quantization(s) or str(q.get("quant_method") or "")
    kernel = workspace_kernel(line, method, q, gpu.sm if gpu else 0, s.enable_expert_parallel)
    if method and not kernel:
        return 0, f"fused-MoE workspace of {method} experts not modelled" + (" on this GPU" if method in ("fp8", "fp8_e4m3", "mxfp4") else "")
    total, how = moe_workspace(shapes, plan.tp, mnbt, line)
    return total, how + (f" ({kernel} {method} experts)" if method else "")


def _overhead(s: Settings, line: RuleLine, plan: ParallelPlan, gpu: Gpu | None) -> tuple[int, str]:
    over = optional_size(s.overhead_bytes, named("overhead_bytes"))
    if over is not None:
        return over, "--overhead-bytes"
    sm = gpu.sm if gpu is not None else 0
    return non_torch(line, plan.tp, plan.pp, sm=sm, nvswitch=bool(sm) and gpu is not None and gpu.nvswitch)


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
        return PoolInputs(
            available_per_stage=per_stage, terms=terms, kv_cache_memory_given=True,
            notes=(*ambiguous_gpu(s.gpu), note), **common,
        )
    if total is None:
        if common["num_gpu_blocks_override"] is not None:
            terms = tuple((BudgetTerm("KV cache memory per GPU", 0, "--num-gpu-blocks-override decides"),) for _ in range(plan.pp))
            return PoolInputs(available_per_stage=(0,) * plan.pp, terms=terms, notes=ambiguous_gpu(s.gpu), **common)
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
    line = effective_line(rules[0], model, s)  # V1's rules where a drafter makes vLLM fall back from V2
    gpu_name, total, total_source = gpu_total(s, line)
    util, util_src = _utilization(s, line)
    common = _scheduler(s, plan, total, gpu_name, version, max_model_len, rules, model.encoder_decoder)
    bypass = _bypass(s, plan, total, common)
    if bypass is not None:
        return bypass
    assert total is not None  # _bypass answers when there is no total
    # vLLM request_memory: ceil(total x utilization) from 0.14; the float product before
    requested = math.ceil(total * util) if line.request_ceil else int(total * util)
    gpu = catalog_gpu(s, gpu_name)
    sm = gpu.sm if gpu else 0
    stage_weights = weights_per_stage(s, model, plan, checkpoint, cache.mamba_dtype_bytes, mxfp4_kernel(line, sm), fp8_marlin=fp8_marlin(sm))
    weights, src = with_lora(s, model, plan, *stage_weights, cache.mamba_dtype_bytes)
    mnbt = common["max_num_batched_tokens"]
    shapes = _shapes(model, cache.mamba_dtype_bytes, s, sm)
    seqs = _max_num_seqs(s, line, total, gpu_name)
    over, over_src = _overhead(s, line, plan, gpu)
    graph, graph_src = cudagraph_term(s, line, shapes, model, plan, mnbt, seqs[0], sm)
    notes: list[str] = list(ambiguous_gpu(s.gpu))
    v2 = bool(model_runner_v2(line, model, s))  # the release runs model runner V2 for this model
    encoder = encoder_term(s, model, line, plan.tp, mnbt, seqs[0], max_model_len, shapes.dtype_bytes, v2)
    if _multimodal(model) and encoder is None:
        notes.append("the multimodal/encoder profile run is not modelled: pass --activation-bytes from vLLM's log")
    available, terms, acts, overs = [], [], [], []
    for stage, w in enumerate(weights):
        if w > requested:
            raise PlanError(
                f"weights on one GPU of PP stage {stage} ({format_bytes(w)}, {src.split(':')[0]}) exceed the memory vLLM may "
                f"use ({format_bytes(requested)} = {util} x {format_bytes(total)}); use more GPUs ({named('tp')}/{named('pp')}), a larger GPU "
                f"or a higher {named('gpu_memory_utilization')}"
            )
        act, act_src = _activation(s, line, model, shapes, plan, mnbt, seqs, stage, gpu)
        if encoder is not None and stage == 0 and s.activation_bytes is None:
            act, act_src = _with_encoder(act, act_src, encoder)
        state, state_how = (0, "") if s.overhead_bytes is not None else _runner_state(
            line, model, shapes, plan, mnbt, seqs[0], stage, v2
        )
        stage_over = over + state
        stage_over_src = f"{over_src} + {state_how} (vLLM {line.label} counts the free-memory delta)" if state else over_src
        kv = requested - w - act - stage_over - graph
        available.append(kv)
        acts.append(act)
        overs.append(stage_over)
        how = "ceil(total x utilization)" if line.request_ceil else "total x utilization"
        terms.append(
            (
                BudgetTerm("GPU memory (CUDA total)", total, total_source),
                BudgetTerm(f"requested = {how}, {util}", requested, util_src),
                BudgetTerm(f"- weights on this GPU (stage {stage})", w, src),
                BudgetTerm("- profile-run peak (torch)", act, act_src),
                BudgetTerm("- non-torch memory", stage_over, stage_over_src),
                BudgetTerm("- CUDA graphs", graph, graph_src),
                BudgetTerm("= KV cache memory per GPU", kv, f"derived (vLLM {line.label} determine_available_memory){_accuracy(s)}"),
            )
        )
    return PoolInputs(
        available_per_stage=tuple(available),
        terms=tuple(terms),
        gpu_memory_utilization=util,
        requested_bytes=requested,
        weights_bytes_per_stage=tuple(weights),
        activation_bytes=max(acts),
        overhead_bytes=max(overs),
        cudagraph_bytes=graph,
        notes=tuple(notes),
        **common,
    )
