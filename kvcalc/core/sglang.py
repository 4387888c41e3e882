"""SGLang's start-up rules, one record per release line, and its server_args defaults.

Read from SGLang's published wheels (``pip download sglang==X --no-deps``; 0.4.0, 0.4.3,
0.4.6, 0.4.10, 0.5.1, 0.5.3, 0.5.6, 0.5.10, 0.5.16, 0.5.23); docs/sglang-rules.md cites
the file and line of every rule (R0..R12 below refer to its sections). The pool itself is
``kvcalc.core.sglang_pool``. Pure: stdlib only, no I/O.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kvcalc.core.record import replace
from kvcalc.errors import PlanError, named

if TYPE_CHECKING:  # mypy reads records as the frozen dataclasses they behave as
    from typing import dataclass_transform

    @dataclass_transform(frozen_default=True)
    def record(cls: type) -> type: ...
else:
    from kvcalc.core.record import record

Release = tuple[int, int, int, int]  # major, minor, patch, post

MIB = 1 << 20
GIB = 1 << 30

# mem_fraction_static default (R10)
MFS_BY_TP = "by TP: 0.79 (>=16), 0.81 (>=8), 0.85 (>=4), 0.87 (>=2), 0.88"
MFS_BY_TP_BIG = MFS_BY_TP + "; GPUs > 80 GiB: (mem - 13 GiB) / mem"
MFS_BY_GPU = "round((mem - reserved) / mem, 3), reserved by GPU size and TP x PP"
MFS_RESERVED = "round((mem - reserved) / mem, 3), reserved = 512 MiB + 1.5 x chunk + 2 x graph bs + TP x PP / 8 GiB"
MFS_RESERVED_PCG = MFS_RESERVED + " + piecewise CUDA graphs"

# the "KV Cache is allocated" line (R5)
LOG_NONE = "no KV line"
LOG_KV = "K size / V size"
LOG_TOKENS = "#tokens, K size / V size"
LOG_DTYPE = "dtype, #tokens, K size / V size"

# sliding-window pools (R8)
SWA_NONE = "every layer full-length"
SWA_ANY = "any sliding-window model: split total tokens x layers by swa_full_tokens_ratio"
SWA_ANY_BUT = SWA_ANY + ", except gpt-oss and Gemma 2/3 (server_args disables it)"
SWA_LIST = "listed architectures: split the pool's bytes by swa_full_tokens_ratio"
SWA_FOLDED = "listed architectures: ratio folded into the bytes per token"

# max_running_requests default (R6)
RUN_POOL_PLUS_ONE = "min(tokens // 2, est + 1)"
RUN_POOL = "min(tokens // 2, est)"
RUN_EST_CAP = "min(user // dp, est) if set, else min(est, tokens // 2)"
RUN_USER = "min(user // dp, tokens // 2) if set, else min(est, tokens // 2)"


@record
class Line:
    """Every SGLang rule that changed a KV number or message, for one release line."""

    label: str
    first: Release
    mfs: str
    kv_log: str
    pad_page: bool  # buffers hold tokens + page_size (else tokens + 1)
    page_round: bool  # tokens rounded down to page_size
    v_head: bool  # bytes per token use head_dim + v_head_dim (else head_dim x 2)
    swa: str
    running: str
    chunk: str  # chunked_prefill_size / cuda_graph_max_bs defaults: "0.4.0" | "0.4.10" | "0.5.3" | "0.5.6"
    mamba: bool = False  # mamba state carved out of the budget (R9)
    # R9: the SSM state dtype is float32 (server arg, sglang==0.5.3: server_args.py:345, configs/qwen3_next.py:301-312);
    # from 0.5.10 a config's mamba_ssm_dtype overrides it (sglang==0.5.10: configs/mamba_utils.py:47-96). Conv state: bf16.
    ssm_dtype_from_config: bool = False
    rest_error: bool = False  # ValueError when the budget is <= 0 (0.5.16+)
    scheduler_gpu_mem: bool = False  # available_gpu_mem on the scheduler line
    cite: str = ""


def _line(label: str, base: Line | None = None, **kw: object) -> Line:
    first = parse_release(label)
    if base is None:
        return Line(label=label, first=first, **kw)  # type: ignore[arg-type]
    return replace(base, label=label, first=first, **kw)  # type: ignore[no-any-return]


_RELEASE_RE = re.compile(r"^v?(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4}))?(?:\.?post(\d{1,4}))?(?:\.?(?:rc|a|b|dev)\d{0,9})*(?:\+[\w.]{0,100})?$", re.I)


def parse_release(text: str) -> Release:
    """'0.4.3.post4', 'v0.5.8.post1', '0.5.10rc1', '0.5' -> (major, minor, patch, post)."""
    m = _RELEASE_RE.match(str(text).strip())
    if not m:
        raise PlanError(
            f"{named('sglang_version')} {text!r} is not a release string; give one as SGLang prints it, "
            "e.g. 0.4.3.post4, v0.5.8.post1 or 0.5.10rc1"
        )
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), int(m.group(4) or 0))


def show(r: Release) -> str:
    return f"{r[0]}.{r[1]}.{r[2]}" + (f".post{r[3]}" if r[3] else "")


_L040 = _line(
    "0.4.0", mfs=MFS_BY_TP, kv_log=LOG_NONE, pad_page=False, page_round=False, v_head=False, swa=SWA_NONE,
    running=RUN_POOL_PLUS_ONE, chunk="0.4.0", cite="sglang==0.4.0: python/sglang/srt/model_executor/model_runner.py:459-517",
)
# the K/V line without #tokens: first in sglang==0.4.1.post6 (0.4.1 .. 0.4.1.post5 have no such log call; a
# held-out docs run dated 2024-12-29 prints none). Pool rule unchanged from 0.4.0.
_L041 = _line(
    "0.4.1.post6", _L040, kv_log=LOG_KV, cite="sglang==0.4.1.post6: python/sglang/srt/mem_cache/memory_pool.py:221",
)
_L043P4 = _line("0.4.3.post4", _L041, kv_log=LOG_TOKENS, cite="sglang==0.4.6: python/sglang/srt/mem_cache/memory_pool.py:243-260")
_L046 = _line(
    "0.4.6", _L043P4, mfs=MFS_BY_TP_BIG, pad_page=True, page_round=True,
    cite="sglang==0.4.6: python/sglang/srt/model_executor/model_runner.py:700-795, server_args.py:224-238",
)
_L0410 = _line(
    "0.4.10", _L046, mfs=MFS_BY_GPU, swa=SWA_ANY, running=RUN_POOL, chunk="0.4.10", scheduler_gpu_mem=True,
    cite="sglang==0.4.10: python/sglang/srt/model_executor/model_runner.py:973-1161, server_args.py:286-356",
)
# gpt-oss and Gemma 2/3 get disable_hybrid_swa_memory (sglang==0.5.1: server_args.py:2274,2295)
_L051 = _line("0.5.1", _L0410, swa=SWA_ANY_BUT, cite="sglang==0.5.1: python/sglang/srt/server_args.py:2227-2295")
_L053 = _line(
    "0.5.3", _L051, mfs=MFS_RESERVED, chunk="0.5.3", mamba=True,
    cite="sglang==0.5.3: python/sglang/srt/model_executor/model_runner.py:1281-1291, server_args.py:542-675",
)
_L056 = _line("0.5.6", _L053, chunk="0.5.6", cite="sglang==0.5.6: python/sglang/srt/model_executor/model_runner.py:1417-1750")
_L0510 = _line(
    "0.5.10", _L056, mfs=MFS_RESERVED_PCG, v_head=True, swa=SWA_LIST, running=RUN_EST_CAP, ssm_dtype_from_config=True,
    cite="sglang==0.5.10: python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py:57-859, server_args.py:1155-1327",
)
_L0516 = _line(
    "0.5.16", _L0510, kv_log=LOG_DTYPE, swa=SWA_FOLDED, running=RUN_USER, rest_error=True,
    cite="sglang==0.5.16: python/sglang/srt/mem_cache/kv_cache_configurator.py:1538-1635, model_executor/pool_configurator.py:171-459",
)
_L0523 = _line(
    "0.5.23", _L0516,
    cite="sglang==0.5.23: python/sglang/srt/mem_cache/kv_cache_configurator.py:3007-3140, model_executor/pool_configurator.py:219-921",
)

LINES: tuple[Line, ...] = (_L0523, _L0516, _L0510, _L056, _L053, _L051, _L0410, _L046, _L043P4, _L041, _L040)
NEWEST_READ = _L0523.first
OLDEST = _L040.first
DEFAULT_VERSION = "0.5.23"


def rules_for(text: str) -> tuple[Line, str]:
    """The rule line of an SGLang release and one sentence saying which line it follows."""
    r = parse_release(text)
    if r < OLDEST:
        raise PlanError(
            f"{named('sglang_version')} {text!r} predates the releases kvcalc read; it has SGLang's rules from "
            f"{show(OLDEST)} on"
        )
    for line in LINES:
        if r >= line.first:
            if line is LINES[0] and r > NEWEST_READ:
                return line, (
                    f"SGLang {show(r)}: newer than the newest release kvcalc was checked against "
                    f"({show(NEWEST_READ)}); rules of {line.label}"
                )
            return line, f"SGLang {show(r)}: rules of the {line.label} line"
    raise PlanError(f"{named('sglang_version')} {text!r}: no rule line covers it")  # pragma: no cover


# ---------------------------------------------------------------- server_args defaults (R10, R11)


def chunked_prefill_default(line: Line, gpu_mib: int | None, dp: int = 1, dp_attention: bool = False) -> int:
    """chunked_prefill_size when not given (0.4.0 halves it, later lines divide it by dp_size with DP attention)."""
    if line.chunk == "0.4.0":
        size = 8192 if gpu_mib is None or gpu_mib >= 25_000 else 2048
        return size // 2 if dp_attention else size
    if gpu_mib is None:
        size = 8192 if line.chunk == "0.4.10" else 4096
    elif gpu_mib < 35 * 1024:
        size = 2048
    elif line.chunk != "0.4.10" and gpu_mib < 60 * 1024:
        size = 4096
    elif gpu_mib < 160 * 1024:
        size = 8192
    else:
        size = 16384
    return size // dp if dp_attention else size


def cuda_graph_max_bs_default(line: Line, gpu_mib: int | None, tp: int) -> int:
    """cuda_graph_max_bs when not given: only the 0.5.3+ reserve formula reads it."""
    if gpu_mib is None:
        return 160
    if line.chunk in ("0.4.0", "0.4.10"):
        return 8 if gpu_mib < 25_000 else 160
    small = 16 if line.chunk == "0.5.3" else 24
    for limit, low, high in ((20, 8, 8), (35, small, 80), (60, 32, 160), (160, 256, 512)):
        if gpu_mib < limit * 1024:
            return low if tp < 4 else high
    return 512


def _piecewise_tokens(max_tokens: int) -> int:
    """How many piecewise CUDA-graph sizes 0.5.10 captures up to ``max_tokens``."""
    sizes = [
        *range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
        *range(1280, 4097, 256), *range(4608, max_tokens + 1, 512),
    ]
    return sum(1 for s in sizes if s <= max_tokens)


def _by_tp(tp: int) -> float:
    for limit, value in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if tp >= limit:
            return value
    return 0.88


def mem_fraction_static_default(
    line: Line, gpu_mib: int | None, *, tp: int, pp: int, dp: int, dp_attention: bool, chunk: int, graph_bs: int, mla: bool
) -> tuple[float, str]:
    """SGLang's mem_fraction_static when --mem-fraction-static is not given, and how it came."""
    if line.mfs == MFS_BY_TP or (line.mfs == MFS_BY_TP_BIG and (gpu_mib is None or gpu_mib <= 81920)):
        return _by_tp(tp), f"SGLang {line.label} default by TP size {tp}"
    if gpu_mib is None:
        return 0.88, f"SGLang {line.label} default when the GPU memory is unknown"
    if line.mfs == MFS_BY_TP_BIG:
        return (gpu_mib - 13 * 1024) / gpu_mib, f"SGLang {line.label} default (mem - 13 GiB) / mem"
    par = tp * pp
    if line.mfs == MFS_BY_GPU:
        if gpu_mib < 35 * 1024:
            reserved = (2.8 + par / 10) * 1024
        elif gpu_mib < 90 * 1024:
            reserved = (9.5 + par / 2) * 1024
        elif gpu_mib < 160 * 1024:
            reserved = (12 + par / 2) * 1024
        else:
            reserved = 32 * 1024
        reserved += 4 * 1024 if dp_attention else 0
    else:
        reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + par / 8 * 1024
        if dp_attention:
            reserved += graph_bs * dp * 3 + (graph_bs * dp * 1.5 if graph_bs > 300 else 0)
        if line.mfs == MFS_RESERVED_PCG:
            reserved += 1.5 * 1024 if mla else _piecewise_tokens(chunk) * 8
        if gpu_mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
    value = round((gpu_mib - reserved) / gpu_mib, 3)
    return value, f"SGLang {line.label} default round(({gpu_mib} MiB - {reserved:g} MiB reserved) / {gpu_mib} MiB, 3)"


def max_running_requests(line: Line, tokens: int, context_len: int, user: int | None, dp: int) -> tuple[int, str]:
    """R6: the request count the scheduler allows, and the rule."""
    est = min(max(int(tokens / context_len * 512), 2048), 4096) if context_len else 2048
    half = tokens // 2
    if line.running in (RUN_POOL_PLUS_ONE, RUN_POOL):
        pool = (user if user is not None else est) + (1 if line.running == RUN_POOL_PLUS_ONE else 0)
        want = half if user is None else user // dp
        return min(want, pool), f"min({'tokens // 2' if user is None else 'max_running_requests // dp'}, request pool {pool})"
    if user is not None:
        if line.running == RUN_EST_CAP:
            return min(user // dp, est), f"min(max_running_requests // dp, {est})"
        return min(user // dp, half), "min(max_running_requests // dp, tokens // 2)"
    return min(est, half), f"min(clamp(tokens / context_len x 512, 2048, 4096) = {est}, tokens // 2)"


# ---------------------------------------------------------------- what the weight load holds besides the weights

# SGLang builds the model under ``with torch.device("cuda")`` (sglang==0.4.3.post4:
# python/sglang/srt/model_loader/loader.py:354-356), so each rotary embedding's cos/sin table is computed on the
# GPU and kept there as a buffer; it is part of the "mem usage" of 'Load weight end', not of the checkpoint.
# One table per distinct rope configuration (get_rope caches instances: sglang==0.4.3.post4:
# python/sglang/srt/layers/rotary_embedding.py:992,1026-1027).
ROPE_FP32_CUDA = (0, 4, 2, 1)  # sglang==0.4.2.post1: python/sglang/srt/layers/rotary_embedding.py:84-88 keeps fp32 on CUDA
ROPE_FP32_HIP = (0, 5, 23, 0)  # sglang==0.5.23: python/sglang/srt/layers/rotary_embedding/base.py:116-120 (0.5.16 :97-99 casts on HIP)


def _rope_positions(arch: dict) -> int:
    """Rows of the cos/sin table: the positions SGLang's rotary class precomputes (sglang==0.4.3.post4:
    python/sglang/srt/layers/rotary_embedding.py:105 plain/llama3, :307-308 linear and :361-367 dynamic x factor,
    :481-482 yarn and :701 deepseek_yarn original x factor, :545-561 longrope short + long tables and both
    concatenated once more)."""
    pos = arch.get("max_position_embeddings")
    pos = int(pos) if isinstance(pos, (int, float)) and not isinstance(pos, bool) and pos > 0 else 8192
    rs = arch.get("rope_scaling")
    if not isinstance(rs, dict):
        return pos
    kind, factor, orig = rs.get("rope_type", rs.get("type")), rs.get("factor"), rs.get("original_max_position_embeddings")
    num = (int, float)
    if kind in ("linear", "dynamic") and isinstance(factor, num):
        return int(pos * factor)
    if kind in ("yarn", "deepseek_yarn") and isinstance(factor, num) and isinstance(orig, num):
        return int(orig * factor)
    if kind in ("longrope", "su") and isinstance(orig, num):
        return 2 * (pos + int(orig))
    return pos


def rope_cache_bytes(arch: dict, head_dim: int, mla: bool, model_dtype_bytes: int, release: Release, nvidia: bool) -> tuple[int, str]:
    """The cos/sin table(s) SGLang keeps on the GPU after loading: positions x rotary dim x element bytes
    (fp32 on CUDA from 0.4.2.post1, on ROCm from 0.5.23; the model dtype before: sglang==0.4.2:
    python/sglang/srt/layers/rotary_embedding.py:78). 0.4.1.x models import vLLM's get_rope (sglang==0.4.1.post6:
    python/sglang/srt/models/llama.py:29); kvcalc takes its table as the model dtype too (not read)."""
    if mla:
        rot = int(arch.get("qk_rope_head_dim") or 0)
    else:
        prf = arch.get("partial_rotary_factor", 1.0)
        rot = int(head_dim * (prf if isinstance(prf, (int, float)) and 0 < prf <= 1 else 1.0))
    if rot <= 0:
        return 0, "no rotary table"
    kind = (arch.get("rope_scaling") or {}).get("rope_type", "") if isinstance(arch.get("rope_scaling"), dict) else ""
    fp32 = release >= (ROPE_FP32_CUDA if nvidia else ROPE_FP32_HIP) and kind not in ("longrope", "su")
    elt = 4 if fp32 else model_dtype_bytes
    # Gemma 3: a local and a global base, two tables (sglang==0.5.10: python/sglang/srt/models/gemma3_causal.py:183-200)
    tables = 2 if arch.get("rope_local_base_freq") else 1
    rows = _rope_positions(arch)
    return tables * rows * rot * elt, (
        f"RoPE cos/sin table{'s' if tables > 1 else ''} on the GPU: {tables} x {rows:,} positions x {rot} x "
        f"{elt} B ({'fp32' if fp32 else 'model dtype'})"
    )


SSM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def state_dtype_bytes(line: Line, config_ssm_dtype: object) -> tuple[int, int]:
    """R9: (conv, SSM) bytes per element of SGLang's mamba state pool: conv bf16, SSM float32 unless the
    release reads the config's mamba_ssm_dtype and it names another (an unknown name falls back to float32,
    as SGLang does with a warning)."""
    ssm = 4
    if line.ssm_dtype_from_config and isinstance(config_ssm_dtype, str):
        ssm = SSM_DTYPE_BYTES.get(config_ssm_dtype, 4)
    return 2, ssm

