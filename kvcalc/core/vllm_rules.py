"""vLLM's KV-cache rules, one record per release line (V1 engine, 0.8.0 onwards).

Each ``RuleLine`` holds every rule that changed a KV number or message between vLLM
releases, read from the published wheels' source (``pip download vllm==X --no-deps``);
docs/vllm-releases.md cites the file and line of every boundary on both of its sides.
The pool code (``kvcalc.core.pool``, ``kvcalc.core.engine``) asks the record, never the
version string. ``rules_for("0.19.1")`` picks the line a release belongs to.

Pure: stdlib only, no I/O.
"""

from __future__ import annotations

import re

from kvcalc.core.record import record
from kvcalc.errors import PlanError, named

Release = tuple[int, ...]

# "GPU KV cache size: N tokens"
TOKENS_BLOCKS = "blocks x block_size"  # 0.8.0-0.9.0.1 (kv_cache_utils.py:535 in 0.8.0)
TOKENS_PER_GROUP = "blocks // groups x block_size"  # 0.9.1-0.10.2 (:867 in 0.9.1)
TOKENS_PER_GROUP_MIN_BS = "blocks // groups x min block size"  # 0.11.0-0.20.0 (:1080 in 0.11.0)
TOKENS_CONCURRENCY = "int(max_concurrency x max_model_len)"  # 0.20.1- (:1706 in 0.20.1)

# "Maximum concurrency for L tokens per request"
CONC_TOKENS = "blocks x block_size / max_model_len"  # 0.8.0-0.9.0.1
CONC_POOLED = "blocks / cdiv(group size x sum of needs, group size x page)"  # 0.9.1-0.26.0
CONC_PER_GROUP = "blocks / sum over groups of cdiv(need, page)"  # 0.27.0-

# blocks a sliding-window layer reserves for one request (SlidingWindowSpec)
SW_ALL_FULL = "no sliding-window spec: every layer full"  # 0.8.0-0.8.2
SW_BATCHED = "cdiv(min(W - 1 + max_num_batched_tokens, L), bs) + 1"  # 0.8.3-0.25.1
SW_IN_FLIGHT = "cdiv(min(W - 1 + batches in flight x max_num_batched_tokens, L), bs) + 1"  # 0.26.0-0.27.1
SW_RETAINED = "cdiv(min(W - 1 + extra retained + in flight, L), bs) + 1"  # 0.28.0-

# what the "one request at max_model_len must fit" check compares
FIT_MIN_ALL = "min memory over workers vs each worker's layers"  # 0.8.0-0.8.1
FIT_WORKER = "each worker's memory vs its own layers"  # 0.8.2-0.13.0
FIT_WHOLE_MODEL = "min memory over workers vs the whole model's groups"  # 0.14.0-0.16.x (a regression)
FIT_FIRST_GROUP = "each worker's memory vs its groups, the first group's blocks only"  # 0.17.0-0.18.0
FIT_GROUPS = "each worker's memory vs the sum over its groups"  # 0.19.0-0.28.0
FIT_NULL_BLOCK = "each worker's memory less the null block vs the sum over its groups"  # 0.29.0-

# where and how the size/concurrency lines are logged
LOG_PER_WORKER = "per worker, before the minimum over workers"  # 0.8.0-0.11.0
LOG_AFTER_MIN = "once, after the minimum over workers"  # 0.11.1-0.27.1
LOG_COMBINED = "one combined line from the engine core"  # 0.28.0-0.29.0
LOG_DEVICE = "one combined line naming the device"  # 0.30.0-

# default max_num_batched_tokens / max_num_seqs by GPU (engine/arg_utils.py, usage context API server)
BATCH_BY_NAME = "8192 tokens / 1024 seqs on H100/H200, else 2048 / 1024"  # 0.8.0-0.8.3
BATCH_BY_NAME_SEQS = "8192 / 1024 on H100/H200, else 2048 / 256"  # 0.8.4
BATCH_70GIB = "8192 / 1024 on GPUs >= 70 GiB, else 2048 / 256"  # 0.8.5
BATCH_70GIB_NO_A100 = "8192 / 1024 on GPUs >= 70 GiB other than A100, else 2048 / 256"  # 0.9.0-0.27.1
BATCH_160GIB = "16384 / 1024 on GPUs >= 160 GiB; 8192 / 1024 >= 70 GiB (not A100); else 2048 / 256"  # 0.28.0-0.32
BATCH_160GIB_NO_GB10 = BATCH_160GIB + "; GB10 in the lowest tier"  # 0.33.0-

# the dummy sampler's top-k/top-p path in the profile run (docs/vllm-budget.md section 3)
SAMPLER_NATIVE_OR_FI = "native sort, or FlashInfer when installed"  # 0.8.0-0.11.x (VLLM_USE_FLASHINFER_SAMPLER None = on)
SAMPLER_NATIVE = "native sort (FlashInfer opt-in)"  # 0.12.0-0.16.x (vllm==0.12.0: ops/topk_topp_sampler.py:35)
SAMPLER_TRITON = "Triton top-k/top-p, in place"  # 0.17.0-0.20.x V1 runner (vllm==0.20.0: ops/topk_topp_sampler.py:251)
# 0.21.0 turns VLLM_USE_FLASHINFER_SAMPLER on by default (vllm==0.21.0: envs.py:726-730): the V1 runner's dummy
# sampler takes FlashInfer's top-k/top-p, FLASHINFER_SAMPLER_BYTES per element as before 0.12 (docs/vllm-budget.md 3)
SAMPLER_FLASHINFER = "FlashInfer top-k/top-p (VLLM_USE_FLASHINFER_SAMPLER on by default)"  # 0.21.0-0.28.x V1 runner
# 0.29-0.32, V2 for every architecture: the dummy requests register no sampling params, so apply_sampling_params
# returns the logits untouched (no fp32 copy) and top-k/top-p is skipped; only the Gumbel kernel's per-block tables
# follow (vllm==0.29.0: v1/worker/gpu/sample/sampler.py:218-219, :296-323; gumbel.py:275-279; 0.31.0: sampler.py:235-236)
SAMPLER_V2_DUMMY = "model runner V2: logits in the model dtype, no per-request processing, Gumbel argmax"
# 0.33: after that pass every dummy request is given SamplingParams.for_sampler_warmup() (top_k 50, top_p 0.9, penalties,
# logit bias, min_p, logprobs; vllm==0.33.0: sampling_params.py:1477-1493) and the sampler runs again
# (v1/worker/gpu/model_runner.py:1008-1014): an fp32 copy of the logits (sample/sampler.py:242), then FlashInfer's
# top-k/top-p where the GPU takes it, else the Triton kernel and Gumbel (budget_rules.V2_WARMUP_*)
SAMPLER_V2_WARMUP = "model runner V2: a second pass with warm-up sampling params (fp32 copy + top-k/top-p)"

# architectures that default to model runner V2 before it is the default for all (0.29.0): DEFAULT_V2_MODEL_RUNNER_
# ARCHITECTURES, config/vllm.py (vllm==0.22.0: :69; 0.23.0: :69-75; 0.24.0: :68-77; 0.25.0: :68-74); none in 0.21.0
# (VLLM_USE_V2_MODEL_RUNNER default "0", vllm==0.21.0: envs.py:1711-1713)
V2_ARCHS_0_22 = ("Qwen3ForCausalLM",)
V2_ARCHS_0_23 = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM")
V2_ARCHS_0_25 = ("DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "Qwen2MoeForCausalLM")
V2_ARCHS_0_24 = V2_ARCHS_0_23 + V2_ARCHS_0_25
# vllm==0.26.0: config/vllm.py:68-77; 0.27.0: :69-79 (+ KimiK3); 0.28.0: :69-80 (+ DeepseekV4)
V2_ARCHS_0_26 = V2_ARCHS_0_25 + ("InklingForCausalLM", "InklingForConditionalGeneration", "LongcatFlashNgramForCausalLM")
V2_ARCHS_0_27 = V2_ARCHS_0_26 + ("KimiK3ForConditionalGeneration",)
V2_ARCHS_0_28 = V2_ARCHS_0_27 + ("DeepseekV4ForCausalLM",)
# How a release before 0.29 picks model runner V2 by default (_is_default_v2_model_runner_model):
# a listed architecture that is neither MoE nor quantized (vllm==0.22.0: config/vllm.py:512-527; 0.23.0: :538-553);
V2_LISTED_DENSE_UNQUANTIZED = "listed, not MoE, not quantized"
# any listed architecture (vllm==0.24.0: config/vllm.py:544-556);
V2_LISTED = "listed"
# a listed architecture, or any model that is not MoE, hybrid (mamba / linear attention) or attention-free
# (vllm==0.25.0: config/vllm.py:556-574; 0.26.0: :605-622; 0.27.0: :637-658, a hybrid only when listed; 0.28.0: :691-712)
V2_LISTED_OR_DENSE = "listed, or not MoE"

# chunked-local attention layers (Llama 4)
CHUNKED_FULL = "no chunked-local spec: the layers are full attention"  # 0.8.0-0.9.2 (absent in vllm==0.9.2 kv_cache_interface.py)
CHUNKED_HYBRID = "chunked-local groups of the hybrid manager"  # 0.10.0, 0.14.0- (vllm==0.10.0: kv_cache_interface.py:153-165)
CHUNKED_PROMOTED = "chunked-local layers promoted to full (hybrid manager off)"  # 0.10.1-0.13.0 (vllm==0.10.1: config/__init__.py:3675)

# attention block size of attention + mamba hybrids (docs/vllm-releases.md section 7)
MAMBA_NONE = "no V1 mamba support"  # 0.8.0-0.9.2
MAMBA_16 = "16 x cdiv(mamba page, 16 x attention bytes per token)"  # 0.10.0-0.19.x (vllm==0.10.0: models/config.py:270)
MAMBA_BLOCK = "align = max(16, block size); align x cdiv(...)"  # 0.20.0-0.26.x (vllm==0.20.0: platforms/interface.py:502-605)
MAMBA_MLA128 = MAMBA_BLOCK + "; MLA hybrids align >= 128"  # 0.27.0- (vllm==0.27.0: platforms/interface.py:888)

# which MXFP4 MoE kernel a plain `pip install vllm` picks on CUDA (its weights are padded for Marlin)
MXFP4_TORCH27 = "Marlin on every CUDA GPU but sm100: the wheel pins torch 2.7.1"  # 0.10.1.x (vllm==0.10.1.1: mxfp4.py:123-135)
MXFP4_NO_TRITON_KERNELS = "Marlin: triton_kernels and FlashInfer are optional extras"  # 0.10.2-0.11.x (vllm==0.11.0: mxfp4.py:59-102)
MXFP4_VENDORED = "Marlin below sm90 and from sm110; Triton (vendored triton_kernels) on sm90-sm10x"  # 0.12.0- (vllm==0.12.0: mxfp4.py:150-162)
# from 0.25 the Triton path deletes the checkpoint-layout scale (and value) parameters once swizzled
# (vllm==0.25.0: model_executor/layers/fused_moe/oracle/mxfp4.py:1150-1157; the same in 0.33.0 :1466-1473)
MXFP4_VENDORED_FREED = MXFP4_VENDORED + "; the Triton path frees the checkpoint's scales"  # 0.25.0-

# how torch's NCCL communicator of the TP device group is paid inside the profiling window (docs/vllm-budget.md 2.4.2).
# The profile run's logits all_gather goes through torch.distributed on that group (vllm==0.19.0: model_executor/
# layers/logits_processor.py:77-83, distributed/device_communicators/base_device_communicator.py:196)
TP_COMM_LAZY = "created and connected by the profile run's all_gather"  # -0.22.x: init_process_group without device_id
TP_COMM_CONNECT = "created at init (device-bound default group), connected by the all_gather"  # 0.23.0- (parallel_state.py:1441-1451)


@record
class RuleLine:
    """The rules of the vLLM releases ``first`` .. ``last`` (inclusive)."""

    first: Release
    last: Release
    tokens: str
    concurrency: str
    sliding: str
    fit_check: str
    log: str
    batch_defaults: str
    null_block: bool  # the pool holds back block 0 (BlockPool, from 0.8.3)
    hybrid_groups: bool  # the hybrid KV-cache manager groups sliding/full layers (0.9.1-)
    group_ratio: int  # hundredths: layers per group = max if max < ratio x min, else min; 0: always min
    in_flight_batches: bool  # sliding reservation scales with batches in flight (0.26.0-)
    override_applied: bool  # --num-gpu-blocks-override takes effect (not in 0.9.1)
    default_utilization: float  # --gpu-memory-utilization default
    cudagraphs_subtracted: bool  # the CUDA-graph estimate is taken out of the KV budget (0.20.0-)
    request_ceil: bool  # requested memory = ceil(total x utilization) (0.14.0-)
    gib_round: bool  # GiB printed as round(x, 2) ("24.0"); else "%.2f"
    # the fit error's text
    fit_gib_unit: str  # "GB" (0.8.0-0.8.2, still bytes / 2**30) or "GiB"
    fit_estimate: str  # "none" (0.8.0-0.8.3), "blank" (0.8.4-0.9.0.1: the number is lost), "shown"
    fit_whose: str  # "models's" (-0.21.x) or "model's" (0.22.0-)
    docs_url: bool  # the conserving-memory docs link (0.13.0-)
    cpu_clause: bool  # "(which also controls CPU memory on the CPU backend)" (0.22.0-)
    chunked: str = CHUNKED_HYBRID
    mamba_align: str = MAMBA_MLA128
    # refuses --kv-cache-dtype float16/bfloat16 differing from a float model dtype
    # (vllm==0.33.0: vllm/config/vllm.py:1492-1508, called at :1540; absent in vllm==0.32.0)
    float_kv_mismatch: bool = True
    # cross-attention reserves max_num_encoder_input_tokens (= max_num_batched_tokens) per request,
    # not the encoder length (vllm==0.11.0: vllm/v1/kv_cache_interface.py:256-262; vllm==0.10.2: :230-235)
    cross_from_batch: bool = True
    # the MXFP4 MoE kernel of a pip install (MXFP4_* above; kvcalc.core.quant.mxfp4_marlin)
    mxfp4_kernel: str = MXFP4_VENDORED_FREED
    # --- the memory budget (issue 14; docs/vllm-budget.md cites each rule) ---
    # top-k/top-p path of the profile run's dummy sampler over max_num_seqs x vocab logits,
    # and its peak bytes per element with a bf16 model (docs/vllm-budget.md section 3)
    sampler_path: str = SAMPLER_V2_WARMUP  # SAMPLER_* above
    sampler_bytes: int = 14
    # 0.8.x charges all non-torch memory on the device, the CUDA context included
    # (vllm==0.8.5: v1/worker/gpu_worker.py:200-210); 0.9+ only what grew since init_device
    cuda_context_charged: bool = False
    # 0.27+: device-wide free-memory delta ("total consumed") replaces non-torch increase
    # (vllm==0.33.0: utils/mem_utils.py:312-321; present in 0.27.0, absent in 0.26.0). It also charges what
    # torch allocated after the init snapshot and before the profile run, outside the weights' measurement:
    # model runner V2's sampler state and PP receive buffers (vllm==0.29.0: utils/mem_utils.py:317-326)
    free_delta_accounting: bool = True
    # model runner V2 for every architecture: the default from 0.29.0 (vllm==0.29.0: config/vllm.py:645-677);
    # before, V1 except the v2_default_archs below
    v2_for_all: bool = True
    # vLLM compiles through torch._inductor.standalone_compile (VLLM_USE_STANDALONE_COMPILE on: vllm==0.29.0
    # envs.py:744-745, compilation/backends.py:96-112; off by default in 0.11.x, vllm==0.11.0 envs.py; torch
    # older than 2.8 in 0.10.1 and earlier, vllm==0.10.2: compilation/backends.py:32-40), which turns on Triton
    # autotuning at compile time (torch 2.8-2.14: _inductor/standalone_compile.py, config.patch(
    # "triton.autotune_at_compile_time", True)): a cold compile inside the profile run allocates random example
    # tensors of each generated kernel's arguments (budget_rules.compile_examples)
    compile_examples: bool = True
    # with TP > 1 the embedding is vLLM's fused CUDA op, not an Inductor kernel (vllm==0.29.0:
    # model_executor/layers/vocab_parallel_embedding.py:331-336, :499-513; absent in 0.28.0)
    tp_embedding_fused: bool = True
    # fused-MoE workspace (workspace13 + workspace2 of the modular kernel) lives in the worker's
    # WorkspaceManager, so it outlives the profile forward and sits under the dummy sampler run
    # (vllm==0.19.0: model_executor/layers/fused_moe/modular_kernel.py:1063, v1/worker/workspace.py:
    # 162-176; unquantized MoE goes through it from 0.14.0, vllm==0.14.0: unquantized_fused_moe_method.py:283).
    # False: 0.13 and earlier call fused_experts_impl, which allocates its caches per call
    # (vllm==0.13.0: fused_moe.py:1838-1847) and frees them before the sampler runs
    moe_workspace_kept: bool = True
    # rows per workspace chunk (VLLM_FUSED_MOE_CHUNK_SIZE, 16384 in 0.14-0.17: vllm==0.17.0:
    # modular_kernel.py:1035-1053, envs.py:824); 0: no chunking (gone in 0.18.0)
    moe_chunk_tokens: int = 0
    # FP8 experts with 128x128 block scales on Hopper under TP alone take TritonExperts ("prefer Triton for TP
    # and FI CUTLASS for EP": vllm==0.17.0 fused_moe/oracle/fp8.py:85-95, the same in 0.33.0 :122-132); 0.14-0.16
    # try FlashInfer CUTLASS / DeepGEMM first there (vllm==0.16.0: oracle/fp8.py:154-165; 0.14.0: :72-138)
    fp8_moe_hopper_triton: bool = True
    # MXFP4 experts go through the modular kernel (its workspace manager) from 0.17 (vllm==0.17.0: quantization/
    # mxfp4.py:1046-1047, self.moe_kernel.apply); 0.14-0.16 call fused_marlin_moe, whose caches are per call (0.16.0: :904)
    mxfp4_modular: bool = True
    # the dummy sampler goes through the Triton top-k/top-p kernel by default, which keeps an fp32
    # (min(next_pow2(min(SMs, rows)), SMs) x vocab) buffer in _TRITON_BUFFER_CACHE (vllm==0.19.0:
    # v1/sample/ops/topk_topp_triton.py:1010-1021; budget_rules.topk_sm_buffer). 0.17.0-0.20.0:
    # topk_topp_triton.py appears in 0.17.0 (absent in vllm==0.16.0), FlashInfer's sampler is opt-in
    # (VLLM_USE_FLASHINFER_SAMPLER default None, vllm==0.20.0: envs.py:716-720), rows >= 8 take the
    # kernel (ops/topk_topp_sampler.py:251). False from 0.21.0: FlashInfer's sampler is on by default
    # (vllm==0.21.0: envs.py:726-730, ops/topk_topp_sampler.py:39-49); 0.20.1 still has the 0.20.0 code
    # (vllm==0.20.1: envs.py:717-721), so its line keeps the buffer (docs/vllm-budget.md 2.3.2). V2 runner: not modelled.
    topk_sm_buffer: bool = False
    # FlashInfer's float workspace grows to max_num_batched_tokens x query heads x head_dim x 16 B when that exceeds
    # the 394 MiB default, from 0.26.0 (vllm==0.26.0: v1/attention/backends/flashinfer.py:85, _get_workspace_buffer)
    flashinfer_ws_by_batch: bool = True
    # 0.22-0.28: these architectures run model runner V2 by default (V2_ARCHS_* above; v2_default_rule says which
    # other models do). Its profile
    # run differs from V1's: the dummy sampler's requests keep SamplingStates' initial top_k = vocab and
    # top_p = 1.0 (vllm==0.24.0: v1/worker/gpu/sample/states.py:31-35), so no top-k/top-p runs and the
    # peak is the bf16 logits + their fp32 copy (sample/sampler.py:157; budget_rules.V2_DUMMY_SAMPLER_BYTES);
    # and its profile_cudagraph_memory returns 0 (v1/worker/gpu/model_runner.py:684-686), so nothing is
    # subtracted for CUDA graphs. The lines from 0.29 (V2 for all) keep their own sampler_path.
    v2_default_archs: tuple[str, ...] = ()
    v2_default_rule: str = ""  # V2_LISTED* above: how the list (and the model) pick V2 before 0.29; "": never
    # V2's dummy sampler run copies the logits to fp32 (6 B per element: vllm==0.25.0: v1/worker/gpu/sample/
    # sampler.py:157, unconditional); from 0.26 the logits stay in the model dtype (0.26.0: :152-170 in place;
    # 0.27.0: :155-159 and 0.28.0: :192-196 only for requests that need processing, which the dummy ones do not),
    # leaving the Gumbel kernel's tables (gumbel.py:18-27) as with 0.29's SAMPLER_V2_DUMMY
    v2_logits_fp32_copy: bool = False
    # --- communicators (docs/vllm-budget.md 2.4.2) ---
    # the baseline snapshot is taken before init_worker_distributed_environment, so pynccl (TP, PP and the
    # always-built EP group), custom all-reduce and their warm-ups are charged: 0.9.2 (vllm==0.9.2: v1/worker/
    # gpu_worker.py:140 snapshot, :158 init) to 0.10.2 (:175, :193); from 0.11.0 after it (vllm==0.11.0: :169, :182)
    comm_setup_charged: bool = False
    tp_comm: str = TP_COMM_CONNECT  # TP_COMM_* above
    # fewest GPUs for NCCL NVLS: NCCL 2.26.2/2.27.x turn it off for gpuCount <= 2 (nccl v2.27.5-1:
    # src/transport/nvls.cc:160; torch 2.7.x/2.8.0/2.9.x/2.10.0 pin those), 2.28.9+ only below 2
    # (nccl v2.28.9-1: nvls.cc:161; torch 2.11.0 of vLLM 0.20.1, 2.13.0 of 0.27.0)
    nvls_min_gpus: int = 2
    # FlashInfer all-reduce + RMSNorm fusion on by default (enable_allreduce_rms_fusion in the O2/O3 pass
    # config: vllm==0.17.0 config/vllm.py:113-133, :204; False at every level in vllm==0.16.0 config/vllm.py:124-181)
    allreduce_fusion: bool = True
    # vLLM picks FlashInfer for attention on Turing (sm75), where FlashAttention needs sm80: FLASH_ATTN, FLASHINFER,
    # TRITON_ATTN in that order (vllm==0.21.0: platforms/cuda.py:139-146; flash_attn.py:205-206, flashinfer.py:409-412;
    # the same in 0.18.0-0.23.0); from 0.24.0 FlashInfer's floor is sm80, so Turing gets TRITON_ATTN (vllm==0.24.0:
    # v1/attention/backends/flashinfer.py:426-434, the same in 0.33.0)
    flashinfer_on_turing: bool = False
    # the release's PyPI wheel pins a CUDA 13 build of torch (torch 2.11.0 requires nvidia-nccl-cu13, 2.10.0
    # nvidia-nccl-cu12/cuda-runtime-cu12 12.8: the wheels' METADATA; vLLM 0.20.1-0.26 pin 2.11.0, 0.27-0.32 2.13.0,
    # 0.33 2.14.0, 0.17-0.19 2.10.0), and CUDA 13.x needs driver >= 580 (docs.nvidia.com/deploy/cuda-compatibility/
    # minor-version-compatibility.html, table 1), whose GeForce totals are lower (Gpu.total_r580)
    cuda13_wheel: bool = True
    # the derived max_model_len of a YaRN config is original_max_position_embeddings x factor, and the
    # DeepSeek rope types scale max_position_embeddings by theirs (vllm==0.29.0: config/model.py:2445-2458;
    # vllm==0.9.2: config.py:3470-3480); from 0.30 those types are taken as already scaled (vllm==0.30.0 and
    # 0.33.0: config/model.py, "YaRN variants leave max_position_embeddings already scaled")
    yarn_len_from_original: bool = False
    # the multimodal encoder budget counts an item's whole prompt placeholder (PlaceholderRange.length: vllm==0.12.0
    # multimodal/registry.py get_max_tokens_per_item_by_modality -> profiling.get_mm_max_contiguous_tokens; the same
    # in 0.10.2 and 0.11.0); from 0.13 only its embeddings (vllm==0.13.0: profiler.get_mm_max_tokens, num_embeds)
    mm_budget_placeholder: bool = False

    @property
    def label(self) -> str:
        """'0.17.0–0.17.x'; the newest line: '0.33.0 and later'."""
        if self.last == OPEN:
            return f"{show(self.first)} and later"
        last = self.last[:3] if len(self.last) == 4 and self.last[3] == 99 else self.last  # 0.8.2.x -> 0.8.2
        return show(self.first) if last == self.first else f"{show(self.first)}–{show(last)}"


def show(release: Release) -> str:
    """(0, 17, 99) -> '0.17.x' (99 stands for any patch level)."""
    return ".".join("x" if n == 99 else str(n) for n in release)


OPEN = (99, 99, 99)  # the newest line is open-ended
NEWEST_READ = (0, 33, 99)  # the newest release line whose source was read

_BASE = dict(
    tokens=TOKENS_CONCURRENCY,
    concurrency=CONC_PER_GROUP,
    sliding=SW_RETAINED,
    fit_check=FIT_NULL_BLOCK,
    log=LOG_DEVICE,
    batch_defaults=BATCH_160GIB_NO_GB10,
    null_block=True,
    hybrid_groups=True,
    group_ratio=150,
    in_flight_batches=True,
    override_applied=True,
    default_utilization=0.92,
    cudagraphs_subtracted=True,
    request_ceil=True,
    gib_round=True,
    fit_gib_unit="GiB",
    fit_estimate="shown",
    fit_whose="model's",
    docs_url=True,
    cpu_clause=True,
    chunked=CHUNKED_HYBRID,
    mamba_align=MAMBA_MLA128,
    float_kv_mismatch=True,
    cross_from_batch=True,
    mxfp4_kernel=MXFP4_VENDORED_FREED,
    sampler_path=SAMPLER_V2_WARMUP,
    sampler_bytes=14,
    cuda_context_charged=False,
    free_delta_accounting=True,
    v2_for_all=True,
    compile_examples=True,
    tp_embedding_fused=True,
    moe_workspace_kept=True,
    moe_chunk_tokens=0,
    fp8_moe_hopper_triton=True,
    mxfp4_modular=True,
    topk_sm_buffer=False,
    v2_default_archs=(),
    v2_default_rule="",
    v2_logits_fp32_copy=False,
    comm_setup_charged=False,
    tp_comm=TP_COMM_CONNECT,
    nvls_min_gpus=2,
    allreduce_fusion=True,
    flashinfer_on_turing=False,
    cuda13_wheel=True,
    yarn_len_from_original=False,
    mm_budget_placeholder=False,
)


def _line(first: Release, last: Release, **changes: object) -> RuleLine:
    values = dict(_BASE)
    values.update(changes)
    return RuleLine(first, last, **values)  # type: ignore[arg-type]


# Newest first; each line states how it differs from the current one (0.33).
# the 0.29-0.32 dummy sampler: SAMPLER_V2_DUMMY, 2 B per (row x vocab) element (bf16 logits); 0.33 adds a second,
# "warmup params" pass with the fp32 pipeline (SAMPLER_V2_WARMUP: 14 B with FlashInfer's top-k/top-p)
_V2_DUMMY = dict(sampler_path=SAMPLER_V2_DUMMY, sampler_bytes=2)
_V0_22 = dict(
    batch_defaults=BATCH_160GIB, log=LOG_COMBINED, float_kv_mismatch=False, yarn_len_from_original=True, **_V2_DUMMY
)
# model runner V2 is the CUDA default from 0.29.0 (vllm==0.29.0: config/vllm.py:645-677); before, V1 for most models
_V0_28 = dict(
    _V0_22, fit_check=FIT_GROUPS, sampler_path=SAMPLER_FLASHINFER, sampler_bytes=14, v2_for_all=False,
    tp_embedding_fused=False,
)
_V0_27 = dict(_V0_28, sliding=SW_IN_FLIGHT, log=LOG_AFTER_MIN, batch_defaults=BATCH_70GIB_NO_A100)
# "total consumed" (free-memory delta) from 0.27.0 (vllm==0.27.0: utils/mem_utils.py); not in 0.26.0
_V0_26 = dict(_V0_27, concurrency=CONC_POOLED, mamba_align=MAMBA_BLOCK, free_delta_accounting=False)
_V0_25 = dict(_V0_26, sliding=SW_BATCHED, in_flight_batches=False, v2_logits_fp32_copy=True, flashinfer_ws_by_batch=False)
_V0_23 = dict(_V0_25, flashinfer_on_turing=True, mxfp4_kernel=MXFP4_VENDORED)
_V0_21 = dict(_V0_23, fit_whose="models's", cpu_clause=False, tp_comm=TP_COMM_LAZY)
# 0.20.1 keeps 0.20.0's sampler: VLLM_USE_FLASHINFER_SAMPLER defaults to None (vllm==0.20.1: envs.py:717-721),
# so the dummy sampler (top_p 0.9, top_k vocab - 1: v1/worker/gpu_model_runner.py:5646-5647) takes the Triton
# kernel for >= 8 rows (v1/sample/ops/topk_topp_sampler.py:251) and caches its buffer (topk_topp_triton.py:1015-1019)
_V0_20_1 = dict(_V0_21, sampler_path=SAMPLER_TRITON, topk_sm_buffer=True)
# 0.20.0's torch pin was not read (no wheel in the index): its NCCL is taken as 0.19's 2.27.5
_V0_20 = dict(_V0_20_1, tokens=TOKENS_PER_GROUP_MIN_BS, nvls_min_gpus=3, cuda13_wheel=False)
_V0_19 = dict(_V0_20, default_utilization=0.9, cudagraphs_subtracted=False, mamba_align=MAMBA_16)
_V0_18 = dict(_V0_19, fit_check=FIT_FIRST_GROUP)
_V0_17 = dict(_V0_18, group_ratio=125, moe_chunk_tokens=16384)
_V0_16 = dict(
    _V0_17, fit_check=FIT_WHOLE_MODEL, sampler_path=SAMPLER_NATIVE, sampler_bytes=38, topk_sm_buffer=False,
    allreduce_fusion=False, fp8_moe_hopper_triton=False, mxfp4_modular=False,
)
_V0_13 = dict(
    _V0_17, fit_check=FIT_WORKER, request_ceil=False, gib_round=False, chunked=CHUNKED_PROMOTED,
    sampler_path=SAMPLER_NATIVE, sampler_bytes=38, moe_workspace_kept=False, topk_sm_buffer=False,
    allreduce_fusion=False, fp8_moe_hopper_triton=False, mxfp4_modular=False,
)
_V0_12 = dict(_V0_13, docs_url=False, mm_budget_placeholder=True)
_V0_11_2 = dict(
    _V0_12, group_ratio=0, sampler_path=SAMPLER_NATIVE_OR_FI, mxfp4_kernel=MXFP4_NO_TRITON_KERNELS, compile_examples=False
)
_V0_11_0 = dict(_V0_11_2, log=LOG_PER_WORKER)
_V0_10_2 = dict(
    _V0_11_0, tokens=TOKENS_PER_GROUP, cross_from_batch=False, comm_setup_charged=True, compile_examples=True
)
_V0_10 = dict(_V0_10_2, mxfp4_kernel=MXFP4_TORCH27, compile_examples=False)
_V0_10_0 = dict(_V0_10, chunked=CHUNKED_HYBRID)
_V0_9_2 = dict(_V0_10, chunked=CHUNKED_FULL, mamba_align=MAMBA_NONE)
_V0_9_1 = dict(_V0_9_2, override_applied=False)
_V0_9_0 = dict(
    _V0_9_2, tokens=TOKENS_BLOCKS, concurrency=CONC_TOKENS, hybrid_groups=False, fit_estimate="blank"
)
_V0_8_5 = dict(_V0_9_0, batch_defaults=BATCH_70GIB, cuda_context_charged=True)
_V0_8_4 = dict(_V0_8_5, batch_defaults=BATCH_BY_NAME_SEQS)
_V0_8_3 = dict(_V0_8_4, batch_defaults=BATCH_BY_NAME, fit_estimate="none")
_V0_8_2 = dict(_V0_8_3, sliding=SW_ALL_FULL, null_block=False, fit_gib_unit="GB")
_V0_8_1 = dict(_V0_8_2, fit_check=FIT_MIN_ALL)

LINES: tuple[RuleLine, ...] = (
    _line((0, 33, 0), OPEN),
    _line((0, 30, 0), (0, 32, 99), batch_defaults=BATCH_160GIB, float_kv_mismatch=False, **_V2_DUMMY),
    _line((0, 29, 0), (0, 29, 99), **_V0_22),
    _line((0, 28, 0), (0, 28, 99), **_V0_28, v2_default_archs=V2_ARCHS_0_28, v2_default_rule=V2_LISTED_OR_DENSE),
    _line((0, 27, 0), (0, 27, 99), **_V0_27, v2_default_archs=V2_ARCHS_0_27, v2_default_rule=V2_LISTED_OR_DENSE),
    _line((0, 26, 0), (0, 26, 99), **_V0_26, v2_default_archs=V2_ARCHS_0_26, v2_default_rule=V2_LISTED_OR_DENSE),
    _line((0, 25, 0), (0, 25, 99), **_V0_25, v2_default_archs=V2_ARCHS_0_25, v2_default_rule=V2_LISTED_OR_DENSE),
    _line((0, 24, 0), (0, 24, 99), **_V0_25, v2_default_archs=V2_ARCHS_0_24, v2_default_rule=V2_LISTED,
          mxfp4_kernel=MXFP4_VENDORED),
    _line((0, 23, 0), (0, 23, 99), **_V0_23, v2_default_archs=V2_ARCHS_0_23, v2_default_rule=V2_LISTED_DENSE_UNQUANTIZED),
    _line((0, 22, 0), (0, 22, 99), **dict(_V0_23, tp_comm=TP_COMM_LAZY), v2_default_archs=V2_ARCHS_0_22,
          v2_default_rule=V2_LISTED_DENSE_UNQUANTIZED),
    _line((0, 21, 0), (0, 21, 99), **_V0_21),
    _line((0, 20, 1), (0, 20, 99), **_V0_20_1),
    _line((0, 20, 0), (0, 20, 0, 99), **_V0_20),
    _line((0, 19, 0), (0, 19, 99), **_V0_19),
    _line((0, 18, 0), (0, 18, 99), **_V0_18),
    _line((0, 17, 0), (0, 17, 99), **_V0_17),
    _line((0, 14, 0), (0, 16, 99), **_V0_16),
    _line((0, 13, 0), (0, 13, 99), **_V0_13),
    _line((0, 12, 0), (0, 12, 99), **_V0_12),
    _line((0, 11, 1), (0, 11, 99), **_V0_11_2),
    _line((0, 11, 0), (0, 11, 0, 99), **_V0_11_0),
    _line((0, 10, 2), (0, 10, 99), **_V0_10_2),
    _line((0, 10, 1), (0, 10, 1, 99), **_V0_10),
    _line((0, 10, 0), (0, 10, 0, 99), **_V0_10_0),
    _line((0, 9, 2), (0, 9, 2, 99), **_V0_9_2),
    _line((0, 9, 1), (0, 9, 1, 99), **_V0_9_1),
    _line((0, 9, 0), (0, 9, 0, 99), **_V0_9_0),
    _line((0, 8, 5), (0, 8, 5, 99), **_V0_8_5),
    _line((0, 8, 4), (0, 8, 4, 99), **_V0_8_4),
    _line((0, 8, 3), (0, 8, 3, 99), **_V0_8_3),
    _line((0, 8, 2), (0, 8, 2, 99), **_V0_8_2),
    _line((0, 8, 0), (0, 8, 1, 99), **_V0_8_1),
)
CURRENT = LINES[0]
OLDEST = LINES[-1].first

_RELEASE_RE = r"^v?(\d{1,4}(?:\.\d{1,6}){1,3})(?:\.?(?:rc|a|b|post|dev)\d{0,9})*(?:\+[\w.]{0,100})?$"
_PARSED: dict[str, Release] = {}  # release strings read in this process


def parse_release(text: str) -> Release:
    """'0.10.1.1', 'v0.22.0', '0.26.1rc1.dev156+g0eec856cc.d20260731', '0.33' -> a tuple.

    A pre-release or dev build counts as the release it leads to (0.26.1rc1 -> 0.26.1): its
    code is that release's, give or take the last commits."""
    text = str(text).strip()
    if text in _PARSED:
        return _PARSED[text]
    m = re.match(_RELEASE_RE, text, re.IGNORECASE)
    if not m:
        raise PlanError(
            f"{named('vllm_version')} {text!r} is not a release string; give one as vLLM prints it, "
            "e.g. 0.10.1.1, v0.22.0 or 0.26.1rc1.dev156+g0eec856cc"
        )
    release = tuple(int(p) for p in m.group(1).split("."))
    if len(_PARSED) < 4096:  # bounded: a sweep of random strings does not grow it without end
        _PARSED[text] = release
    return release


def _pad(r: Release) -> Release:
    return tuple(r) + (0,) * (4 - len(r))


def rules_for(text: str) -> tuple[RuleLine, str]:
    """The rule line of a release and one sentence saying which line it follows."""
    release = parse_release(text)
    r = _pad(release)
    minor_only = len(release) == 2
    if minor_only:  # "0.20": the newest patch level of 0.20 kvcalc knows (0.20.x)
        r = (*release, 99, 0)
    if r < _pad(OLDEST):
        raise PlanError(
            f"{named('vllm_version')} {text!r} predates vLLM's V1 engine; kvcalc has the rules of "
            f"{show(OLDEST)} and later (the V1 engine's KV cache)"
        )
    for line in LINES:  # newest first
        if _pad(line.first) <= r:
            if line is CURRENT and r > _pad(NEWEST_READ):
                return line, (
                    f"vLLM {show(release)}: newer than the newest release kvcalc was checked against "
                    f"({show(NEWEST_READ)}); rules of {line.label}"
                )
            if minor_only:
                return line, f"vLLM {show(release)} (read as {show(release)}.x, its newest patch level): rules of {line.label}"
            return line, f"vLLM {show(release)}: rules of {line.label}"
    raise PlanError(f"{named('vllm_version')} {text!r}: no rule line covers it")  # pragma: no cover - lines are contiguous
