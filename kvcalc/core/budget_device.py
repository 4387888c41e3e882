"""The device-side terms of vLLM's budget, per release line (``RuleLine``): non-torch memory
(kernel modules, NCCL communicators, NVLS buffers, FlashInfer's all-reduce fusion workspace, the
0.8.x CUDA context) and the CUDA-graph estimate (capture sizes, the first graph's sample, the
per-graph driver memory, FlashAttention 3 split accumulators, FlashInfer decode workspaces).

Split from budget_rules (the profile run's torch terms). docs/vllm-budget.md cites the vLLM source
behind each rule. Pure: stdlib only, bytes as integers; every function returns ``(bytes, how)``.
"""

from __future__ import annotations

from kvcalc.core.allocator import LARGE_BUFFER
from kvcalc.core.budget_rules import MIB, Shapes, forward_per_token
from kvcalc.core.units import figure
from kvcalc.core.vllm_rules import RuleLine

# non-torch memory that grows after init_device (0.9+): kernel modules and library handles
# loaded by the first forward; an estimate (public 0.10 logs at TP 1 leave 0.02-0.04 GiB)
NON_TORCH_BASE = 32 * MIB
# NCCL communicators where no set-up size was measured (every GPU but Hopper/Blackwell behind an NVSwitch):
# one ring's connections, not derived: NCCL_BUFFSIZE (4 MiB) x send+recv x 16 channels; a ring connects a rank to
# its two neighbours only, whatever the ranks (nccl v2.27.5-1: src/transport/generic.cc:15-18), and an all-gather on
# one node without NVLS is a ring (src/graph/tuning.cc:256-258); custom all-reduce: 8 MiB IPC buffer + signal
NCCL_PER_PEER = 4 * MIB * 2 * 16
CUSTOM_ALL_REDUCE = 2 * 8 * MIB
# one NCCL communicator's set-up (init + the channels its first collective connects) on H100 behind an NVSwitch
# with NCCL 2.27.5, as vLLM 0.19.0 logs it: the "worker init memory snapshot" of the MoE TP 2 runs, which build
# one more pynccl communicator (the EP group; vllm==0.19.0: distributed/parallel_state.py:1661-1685) than the
# dense TP 2 runs, prints non_torch_memory 1.99 GiB against 1.51 (llm-d-incubation/llm-d-planner
# accuracy/results/v0.19.0/logs, commit d3121e0; TP 4: 2.05 against 1.53): 0.48 GiB ~ 492 MiB
NCCL_COMM_NVSWITCH = 492 * MIB
# NCCL NVLS buffers: nvlsChannels x 2 x (NCCL_NVLS_CHUNKSIZE 128 KiB x NCCL_STEPS 8) x nHeads (one head per
# rank on one node), connected by the first NVLS collective (NCCL_RUNTIME_CONNECT=1), i.e. in the profile run
# (nccl v2.27.5-1: src/transport/nvls.cc:147-152, :334-337, src/init.cc:1148-1153, src/group.cc:156)
NVLS_CHANNELS_SM90 = 16
NVLS_CHANNELS_SM100 = 24  # NVLS_NCHANNELS_SM100_NVL: one node (nvls.cc:149)
NVLS_CHUNK_BYTES = 128 * 1024 * 8
# FlashInfer's trtllm all-reduce fusion workspace: three SymmDeviceMemory buffers, each cuMemCreate'd at the
# multicast granularity (flashinfer-python==0.6.6: comm/trtllm_ar.py:574-614, comm/mnnvl.py:1131-1159); 512 MiB
# each in the public TP 2 log of sgl-project/sglang#18341 (rank pointers 0x20000000 apart). Built while compiling
# (vllm==0.19.0: compilation/passes/fusion/allreduce_rms_fusion.py:759-780), inside memory_profiling
FUSION_BUFFERS = 3
FUSION_GRANULARITY = 512 * MIB
# 0.8.x charges the CUDA context too (cudaFree(0) + torch's kernels under lazy loading)
CUDA_CONTEXT = 512 * MIB
# every captured graph beyond the first of its mode: vLLM counts the second capture's free-memory delta, at least
# 1 MiB (gpu_model_runner.profile_cudagraph_memory): the driver's memory for the instantiated graph, which depends
# on the driver version (vllm#5517: the same A10G/L4 capture 3.8 GiB under CUDA 12.2/12.3 drivers, 1.1 under 12.4)
# and is in no source. MEASURED, not derived: the median over the six distinct TP-1 set-ups whose logs print vLLM's
# own estimate (tests/data/vllm-budget: Llama-3.1-8B on A100-40GB/RTX A6000 5.15 MiB a graph and on H100 3.37,
# Phi-3-mini on RTX 3090 5.37, Qwen3-0.6B on RTX 5090 2.96, Qwen2.5-1.5B on T4 3.37, Qwen3-30B-A3B on H100 2.63,
# each after kvcalc's first capture); kvcalc had assumed 2 MiB
PER_GRAPH = 3_565_158  # 3.4 MiB
# FlashAttention 3 (Hopper) in FULL CUDA graphs: vLLM fixes num_splits at
# attention_config.flash_attn_max_num_splits_for_cuda_graph (default 32; vllm==0.20.1: config/attention.py:27,
# v1/attention/backends/flash_attn.py:372-374, used for batches up to max_cudagraph_capture_size, :430-440), and
# FA3's mha_fwd then allocates out_accum [splits, heads, total_q, head_dim_v] and softmax_lse_accum
# [splits, heads, total_q], both fp32, for every call (vllm-project/flash-attention, commit 01ed8aa:
# hopper/flash_api.cpp, mha_fwd "if (params.num_splits > 1)"); splits are turned off above 992 requests
# (PREPARE_VARLEN_MAX_BATCHES_1CTA, same function)
FA3_GRAPH_SPLITS = 32
FA3_SPLIT_MAX_BATCH = 992
# FlashInfer in FULL CUDA graphs: vLLM keeps one BatchDecodeWithPagedKVCacheWrapper per decode batch size (vllm==0.22.0:
# v1/attention/backends/flashinfer.py:786-816, 0.19.0: :745-780), each with its own 8 MiB device int workspace from
# torch (flashinfer-python==0.6.6, pinned by vLLM 0.19-0.22: decode.py:739-741). The first opens a 20 MiB segment
# (core.allocator: under 10 MiB); the second wrapper's, in the second FULL sample, fits in its free 12 MiB, so the
# sample vLLM extrapolates to the other FULL graphs (mem_get_info: segments, not blocks) holds none of it
FLASHINFER_DECODE_INT_WORKSPACE = 8 * MIB
# FlashInfer's float workspace (VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE, 394 MiB, vllm==0.18.0-0.33.0: envs.py). Under
# model runner V1 the CUDA-graph profiling builds fresh attention metadata builders for its minimal KV cache
# (vllm==0.20.0: v1/worker/gpu_model_runner.py:5863-5884); the profile run builds no attention metadata and PIECEWISE
# captures none (force_attention only for FULL, :6150), so the workspace is first allocated in the first FULL sample's
# warm-up (v1/attention/backends/flashinfer.py:745-753 torch.zeros, :1187-1196), beside the 20 MiB segment its first
# decode wrapper's 8 MiB int workspace opens (core.allocator: under 10 MiB). Model runner V2 shares one workspace
# allocated with the attention backends (vllm==0.22.0: v1/worker/gpu/attn_utils.py:141-142): not in a sample.
FLASHINFER_WORKSPACE = 394 * MIB
FLASHINFER_WS_BYTES_PER_ELEM = 16  # vllm==0.26.0: v1/attention/backends/flashinfer.py:85


def flashinfer_workspace(line: RuleLine, mnbt: int, q_heads: int, head_dim: int) -> int:
    """FlashInfer's float workspace: 394 MiB, from 0.26 at least max_num_batched_tokens x query heads on the rank x
    head size x 16 B (RuleLine.flashinfer_ws_by_batch)."""
    by_batch = mnbt * q_heads * head_dim * FLASHINFER_WS_BYTES_PER_ELEM if line.flashinfer_ws_by_batch else 0
    return max(FLASHINFER_WORKSPACE, by_batch)


def _communicators(line: RuleLine, tp: int, pp: int, measured: bool) -> tuple[int, str]:
    """NCCL communicator memory charged: before 0.11 every communicator vLLM builds at init (pynccl TP, EP, PP, custom
    all-reduce) and torch's TP group's; from 0.11 only the latter, created (to 0.22) or connected by the logits all_gather."""
    if tp == 1 and (pp == 1 or not line.comm_setup_charged):
        return 0, ""
    if not measured:  # no measured size: one ring's connections (the logits all-gather), once; + the PP peer
        peers = (1 if tp > 1 else 0) + (1 if pp > 1 and line.comm_setup_charged else 0)
        car = CUSTOM_ALL_REDUCE if tp > 1 and line.comm_setup_charged else 0
        how = f" + NCCL estimate {peers} ring/peer connection set(s) x {figure(NCCL_PER_PEER)}"
        return peers * NCCL_PER_PEER + car, how + (f" + custom all-reduce {figure(car)}" if car else "")
    comms, car, what = 0, 0, []
    if line.comm_setup_charged:  # snapshot before init_worker_distributed_environment
        comms += (2 if tp > 1 else 0) + (1 if pp > 1 else 0)
        car = CUSTOM_ALL_REDUCE if tp > 1 else 0
        what.append("pynccl TP + EP" if tp > 1 else "")
        what.append("PP" if pp > 1 else "")
    if tp > 1:
        comms += 1
        what.append(f"torch TP group ({line.tp_comm})")
    total = comms * NCCL_COMM_NVSWITCH + car
    how = f" + {comms} NCCL communicator(s) x {figure(NCCL_COMM_NVSWITCH)} ({', '.join(w for w in what if w)})"
    return total, how + (f" + custom all-reduce {figure(car)}" if car else "")


def non_torch(line: RuleLine, tp: int, pp: int, sm: int = 0, nvswitch: bool = False) -> tuple[int, str]:
    """Non-torch memory charged to the budget (docs/vllm-budget.md 2.4): kernel modules; NCCL
    communicators (_communicators); NVLS buffers and the FlashInfer all-reduce fusion workspace on
    Hopper/Blackwell behind an NVSwitch; in 0.8.x the CUDA context as well."""
    hopper_up = nvswitch and sm >= 90
    comm, comm_how = _communicators(line, tp, pp, hopper_up)
    total = NON_TORCH_BASE + comm
    how = f"estimate: kernel modules {figure(NON_TORCH_BASE)}" + comm_how
    if hopper_up and tp >= line.nvls_min_gpus and tp > 1:
        channels = NVLS_CHANNELS_SM100 if sm >= 100 else NVLS_CHANNELS_SM90
        nvls = channels * 2 * NVLS_CHUNK_BYTES * tp
        total += nvls
        how += f" + NCCL NVLS {channels} channels x 2 x 1 MiB x {tp} ranks = {figure(nvls)}"
    if line.allreduce_fusion and tp > 1 and pp == 1 and (sm == 90 or 100 <= sm < 110):  # 9.0 or the 10.x family
        fusion = FUSION_BUFFERS * FUSION_GRANULARITY
        total += fusion
        how += f" + FlashInfer all-reduce fusion workspace {FUSION_BUFFERS} x {figure(FUSION_GRANULARITY)}"
    if line.cuda_context_charged:
        total += CUDA_CONTEXT
        how += f" + CUDA context {figure(CUDA_CONTEXT)} (charged in 0.8.x)"
    return total, how


def capture_sizes(max_num_seqs: int, mnbt: int, top: int = 0, query_len: int = 1) -> tuple[int, ...]:
    """Default cudagraph_capture_sizes: max = min(2 x max_num_seqs x query_len, 512, mnbt), or ``top`` where a model
    config sets it (gpt-oss: 1024); [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16) (vllm==0.20.0:
    config/vllm.py:1429-1433). ``query_len``: 1 + K draft tokens under speculative decoding, from 0.13.0
    (vllm==0.13.0: config/vllm.py:1066-1075; vllm==0.33.0: :695-713 uniform_decode_query_len)."""
    top = min(top or min(2 * max_num_seqs * query_len, 512), mnbt)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    return tuple(x for x in sizes if x <= top)


def fa3_split_accumulators(heads: int, head_dim_v: int, tokens: int) -> int:
    """FA3's fp32 split accumulators for one FULL-graph attention call over ``tokens`` decode rows
    (``heads`` query heads on the rank): out_accum + softmax_lse_accum (FA3_GRAPH_SPLITS above)."""
    if tokens > FA3_SPLIT_MAX_BATCH:
        return 0
    return FA3_GRAPH_SPLITS * heads * tokens * (head_dim_v + 1) * 4


def cudagraph_estimate(
    s: Shapes, tp: int, sizes: tuple[int, ...], max_num_seqs: int, fa3: tuple[int, int] | None = None,
    flashinfer: bool = False, flashinfer_ws: int = 0,
) -> tuple[int, str]:
    """vLLM's 'Estimated CUDA graph memory' (0.18+, subtracted from 0.20): per mode, the first
    (largest) graph is measured as one warm-up run in the default pool plus its capture in the
    profiling pool, both after empty_cache (cudagraph_num_of_warmups = 1 unless eager;
    vllm==0.20.1: config/vllm.py:1095, v1/worker/gpu_model_runner.py:5984-6005, 6140-6172; model
    runner V2 likewise warms up each graph before capturing it and measures both,
    vllm==0.29.0: v1/worker/gpu/cudagraph_utils.py:350-386, 718-800); PIECEWISE
    is captured first, so FULL's first sample is what its attention adds over PIECEWISE's pools;
    the estimate takes the larger first sample (gpu_model_runner.py:6039). FULL_AND_PIECEWISE:
    piecewise graphs for every size, full graphs for decode sizes. ``fa3``: (query heads per rank,
    V head size) where FlashAttention 3 serves the FULL graphs, whose split accumulators are kvcalc's
    FULL first sample; elsewhere the FULL graphs add no first sample of their own. ``flashinfer``: FlashInfer
    serves the FULL graphs: its first sample holds the first decode wrapper's int workspace segment and ``flashinfer_ws``,
    the float workspace (model runner V1, FLASHINFER_WORKSPACE above; 0 under V2)."""
    if not sizes:
        return 0, "no capture sizes"
    full = [x for x in sizes if x <= max_num_seqs]
    graphs = len(sizes) + len(full)
    per_token, _ = forward_per_token(s, tp)
    first_p = 2 * max(sizes) * per_token
    first_f, why = 0, f"activations of the largest, warm-up + capture 2 x {max(sizes)} tokens = {figure(first_p)}"
    if fa3 is not None and full:
        heads, dv = fa3
        first_f = 2 * fa3_split_accumulators(heads, dv, max(full))
        if first_f > first_p:
            why = (
                f"FULL's FlashAttention 3 split accumulators, warm-up + capture 2 x {FA3_GRAPH_SPLITS} splits x "
                f"{heads} heads x {max(full)} tokens x ({dv} + 1) x 4 B = {figure(first_f)}"
            )
    if flashinfer and full and flashinfer_ws + LARGE_BUFFER > max(first_p, first_f):
        first_f = flashinfer_ws + LARGE_BUFFER
        why = (f"FULL's first sample: FlashInfer's workspace {figure(flashinfer_ws)}, first allocated there, + the "
               f"{figure(LARGE_BUFFER)} segment of its first decode wrapper's {figure(FLASHINFER_DECODE_INT_WORKSPACE)} "
               "int workspace" if flashinfer_ws else
               f"FULL's first sample: the {figure(LARGE_BUFFER)} segment of FlashInfer's first decode wrapper's int workspace")
    total = max(first_p, first_f) + graphs * PER_GRAPH
    return total, (
        f"estimate: {graphs} graphs (PIECEWISE {len(sizes)} + FULL {len(full)}, largest {max(sizes)}): "
        f"{why} + {figure(PER_GRAPH)} per graph"
    )
