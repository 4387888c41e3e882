"""SGLang's token pool: bytes per token, the byte budget, ``max_total_num_tokens``, the
K/V buffers it allocates, ``max_running_requests``, and the lines and errors it logs.

Rules R0-R9 of docs/sglang-rules.md, per release line (``kvcalc.core.sglang.Line``).
The per-layer cache specs are kvcalc's own (``kvcalc.core.footprint.stage_specs``), read
with the attention-TP size SGLang shards heads over. Pure: no I/O.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from kvcalc.core.footprint import StageSpecs
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan
from kvcalc.core.sglang import (
    GIB,
    LOG_DTYPE,
    LOG_KV,
    LOG_NONE,
    RUN_EST_CAP,
    RUN_USER,
    SWA_ANY,
    SWA_ANY_BUT,
    SWA_LIST,
    SWA_NONE,
    Line,
    max_running_requests,
)
from kvcalc.core.specs import AttentionSpec, MambaSpec, cdiv
from kvcalc.errors import PlanError, named

if TYPE_CHECKING:  # mypy reads records as the frozen dataclasses they behave as
    from dataclasses import field
    from typing import dataclass_transform

    @dataclass_transform(frozen_default=True, field_specifiers=(field,))
    def record(cls: type) -> type: ...
else:
    from kvcalc.core.record import field, record

# model types SGLang gives a separate sliding-window pool from 0.5.10 (model_config.py:1438 in 0.5.10)
SWA_TYPES = frozenset({"llama4", "llama4_text", "gpt_oss", "mimo_v2_flash", "mimo_v2", "step3p5", "step3.5", "gemma4", "gemma4_text"})
SWA_KINDS = ("sliding", "chunked")
# 0.5.1-0.5.6 turn the split off for these (server_args: disable_hybrid_swa_memory)
SWA_DISABLED = frozenset({"gpt_oss", "gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "olmo2"})
TORCH_DTYPES = {"bfloat16": "torch.bfloat16", "float16": "torch.float16", "float32": "torch.float32",
                "fp8_e4m3": "torch.float8_e4m3fn", "fp8_e5m2": "torch.float8_e5m2"}


@record
class SglangInputs:
    """What SGLang's pool is sized from, each figure with its source; also answers the
    questions other commands ask a vLLM ``PoolInputs`` (``available_per_stage``, ...)."""

    sglang_version: str
    line: Line
    rules: str  # "SGLang 0.5.8: rules of the 0.5.6 line"
    context_len: int
    page_size: int
    chunked_prefill_size: int
    chunked_prefill_size_source: str
    kv_dtype: str  # kvcalc's dtype name of the stored cache
    free_before: int | None = None  # P: free bytes before weights (min over ranks)
    free_after: int | None = None  # A: free bytes after weights (min over ranks)
    mem_fraction_static: float | None = None
    mem_fraction_static_source: str = ""
    kv_cache_memory: int | None = None  # --kv-cache-memory: the pool's bytes, the budget bypassed
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    dp: int = 1  # DP-attention ranks sharing the TP group (their own pools)
    dp_attention: bool = False
    swa_full_tokens_ratio: float = 0.8
    mamba_full_memory_ratio: float = 0.9
    gpu_name: str | None = None
    gpu_memory_bytes: int | None = None
    weights_bytes_per_stage: tuple[int, ...] = ()
    terms: tuple = ()  # per stage: kvcalc.core.pool.BudgetTerm rows
    notes: tuple[str, ...] = ()
    # what a vLLM PoolInputs also answers
    gpu_memory_utilization: None = None
    num_gpu_blocks_override: None = None
    max_concurrent_batches: int = 1
    max_concurrent_batches_source: str = "SGLang: one batch in flight"
    vllm_version: None = None

    @property
    def max_model_len(self) -> int:
        return self.context_len

    @property
    def max_num_batched_tokens(self) -> int:
        return self.chunked_prefill_size

    @property
    def max_num_batched_tokens_source(self) -> str:
        return "SGLang chunked_prefill_size: " + self.chunked_prefill_size_source

    @property
    def in_flight_tokens(self) -> int:
        return self.chunked_prefill_size

    @property
    def kv_cache_memory_given(self) -> bool:
        return self.kv_cache_memory is not None

    @property
    def budget_bytes(self) -> int | None:
        """rest = A - P x (1 - mem_fraction_static), bytes, as SGLang computes it (R2)."""
        if self.kv_cache_memory is not None:
            return self.kv_cache_memory
        if self.free_before is None or self.free_after is None or self.mem_fraction_static is None:
            return None
        rest_gib = self.free_after / GIB - self.free_before / GIB * (1 - self.mem_fraction_static)
        return int(rest_gib * GIB)

    @property
    def available_per_stage(self) -> tuple[int, ...]:
        b = self.budget_bytes or 0
        return (b,) * max(1, len(self.weights_bytes_per_stage))


@record
class StageCell:
    """Bytes per token of one GPU of a PP stage, split by pool."""

    k_full: int  # K (MHA) or latent (MLA) bytes of the full-attention layers
    v_full: int
    k_swa: int = 0
    v_swa: int = 0
    n_full: int = 0
    n_swa: int = 0
    mamba_state: int = 0  # bytes of recurrent state per request (all mamba layers)

    @property
    def full(self) -> int:
        return self.k_full + self.v_full

    @property
    def swa(self) -> int:
        return self.k_swa + self.v_swa


def stage_cell(st: StageSpecs, line: Line, split: bool) -> StageCell:
    """R3: K and V bytes per token of the stage's layers (``split``: sliding layers in their own pool)."""
    k = {"full": 0, "swa": 0}
    v = {"full": 0, "swa": 0}
    n = {"full": 0, "swa": 0}
    state = 0
    for layer, s in st.specs:
        if isinstance(s, MambaSpec):
            state += s.state_bytes
            continue
        if layer.kind == "cross":
            raise PlanError("kvcalc's SGLang rules do not cover encoder-decoder models; use --engine vllm")
        pool = "swa" if split and layer.kind in SWA_KINDS else "full"
        n[pool] += 1
        if layer.kind == "mla":
            k[pool] += s.bytes_per_token
            continue
        assert isinstance(s, AttentionSpec)  # every spec but mamba's is an attention spec
        k[pool] += s.num_kv_heads * s.head_size * s.dtype_bytes
        v[pool] += s.num_kv_heads * (s.head_size_v if line.v_head else s.head_size) * s.dtype_bytes
    return StageCell(k["full"], v["full"], k["swa"], v["swa"], n["full"], n["swa"], state)


def splits_swa(model: ModelSpec, line: Line) -> bool:
    """R8: whether SGLang gives this model's sliding-window layers their own, smaller pool."""
    if line.swa == SWA_NONE or not any(x.kind in SWA_KINDS for x in model.layers):
        return False
    if line.swa == SWA_ANY_BUT:
        return model.model_type not in SWA_DISABLED
    return line.swa == SWA_ANY or model.model_type in SWA_TYPES


@record
class StageTokens:
    full: int
    swa: int | None  # tokens of the sliding-window pool when split
    mamba_cache_size: int | None
    rest: int  # bytes left for the KV pool (after the mamba carve-out)


def _page_floor(n: int, page: int, line: Line) -> int:
    return n // page * page if line.page_round else n


def _mamba_carve(rest: int, cell: StageCell, i: SglangInputs) -> tuple[int, int | None]:
    """R9: the recurrent-state pool takes rest x m / (1 + m); the KV pool the remainder."""
    if not cell.mamba_state:
        return rest, None
    if not i.line.mamba:
        raise PlanError(f"{named('sglang_version')} {i.sglang_version}: SGLang serves mamba hybrids from 0.5.3 on")
    m = i.mamba_full_memory_ratio
    size = int(rest * m / (1 + m)) // cell.mamba_state if rest > 0 else 0
    return rest - size * cell.mamba_state, size


def stage_tokens(cell: StageCell, i: SglangInputs, rest: int) -> StageTokens:
    """R4 + R8: tokens of the full (and sliding-window) pools of one stage from its byte budget."""
    line, page, r = i.line, i.page_size, i.swa_full_tokens_ratio
    rest, mamba = _mamba_carve(rest, cell, i)
    cap = i.max_total_tokens
    if not cell.n_swa:
        tokens = rest // cell.full if cell.full else 0
        tokens = min(tokens, cap) if cap is not None else tokens
        return StageTokens(_page_floor(tokens, page, line), None, mamba, rest)
    if line.swa in (SWA_ANY, SWA_ANY_BUT):  # profiled as if every layer were full, then the token-layers are shared out
        tokens = rest // (cell.full + cell.swa)
        tokens = _page_floor(min(tokens, cap) if cap is not None else tokens, page, line)
        total = tokens * (cell.n_full + cell.n_swa)
        full = int(total / (r * cell.n_swa + cell.n_full))
        return StageTokens(full, int(full * r), mamba, rest)
    if not cell.n_full:  # 0.5.10+: every layer sliding -> one pool, all of it
        tokens = rest // cell.swa
        tokens = _page_floor(min(tokens, cap) if cap is not None else tokens, page, line)
        return StageTokens(tokens, tokens, mamba, rest)
    if line.swa == SWA_LIST:
        both = cell.full + cell.swa
        tokens = rest // both
        tokens = min(tokens, cap) if cap is not None else tokens
        full = _page_floor(int(tokens * both / (cell.full + r * cell.swa)), page, line)
    else:  # SWA_FOLDED
        full = int(rest / (cell.full + r * cell.swa))
        full = _page_floor(min(full, cap) if cap is not None else full, page, line)
    return StageTokens(full, _page_floor(int(full * r), page, line), mamba, rest)


@record
class SglangPool:
    """SGLang's pool on one GPU (the decisive PP stage); answers what a vLLM ``PoolReport`` does."""

    model: ModelSpec
    plan: ParallelPlan
    inputs: SglangInputs
    cell: StageCell
    rest_bytes: int
    max_total_num_tokens: int
    swa_tokens: int | None
    mamba_cache_size: int | None
    max_running: int
    max_running_source: str
    error: str | None
    notes: tuple[str, ...] = field(default=())

    engine = "sglang"
    groups = ()
    workers = ()

    @property
    def pad(self) -> int:
        return self.inputs.page_size if self.inputs.line.pad_page else 1

    @property
    def k_bytes(self) -> int:
        t = max(self.max_total_num_tokens, 0)
        return (t + self.pad) * self.cell.k_full + ((self.swa_tokens or 0) + self.pad) * self.cell.k_swa * (self.swa_tokens is not None)

    @property
    def v_bytes(self) -> int:
        t = max(self.max_total_num_tokens, 0)
        return (t + self.pad) * self.cell.v_full + ((self.swa_tokens or 0) + self.pad) * self.cell.v_swa * (self.swa_tokens is not None)

    @property
    def pool_bytes_per_gpu(self) -> int:
        return self.k_bytes + self.v_bytes

    @property
    def pool_tokens(self) -> int:
        return max(self.max_total_num_tokens, 0)

    @property
    def kv_cache_size_tokens(self) -> int:
        return self.pool_tokens

    @property
    def block_size(self) -> int:
        return self.inputs.page_size

    @property
    def num_blocks(self) -> int:
        return self.pool_tokens // self.inputs.page_size

    @property
    def bytes_per_block(self) -> int:
        return (self.cell.full + self.cell.swa) * self.inputs.page_size

    @property
    def blocks_per_request(self) -> int:
        return cdiv(self.inputs.context_len, self.inputs.page_size)

    @property
    def max_concurrency(self) -> float:
        """Requests of context_len the pool holds at once (before the max_running_requests cap)."""
        return self.pool_tokens / self.inputs.context_len if self.inputs.context_len else 0.0

    @property
    def fits(self) -> bool:
        return self.error is None and self.pool_tokens >= self.inputs.context_len

    @property
    def estimated_max_model_len(self) -> int | None:
        return None if self.error else min(self.pool_tokens, max(self.inputs.context_len, self.model.max_model_len))

    @property
    def rule(self) -> str:
        return "SGLang token pool" + (" + sliding-window pool" if self.swa_tokens is not None else "")


def _rest_error(i: SglangInputs) -> str:
    p, a = (i.free_before or 0) / GIB, (i.free_after or 0) / GIB
    least = 1 - a / p if p else 1.0
    return (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        f"--mem-fraction-static={i.mem_fraction_static}. Raise --mem-fraction-static above "
        f"{math.ceil(least * 1000) / 1000:.3f} (minimum viable = 1 - available/pre = {least:.4f}). "
        "If using speculative decoding, draft weights are now counted."
    )


def _tokens_error(i: SglangInputs) -> str:
    msg = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    if i.line.label in ("0.5.3", "0.5.6", "0.5.10"):
        msg += f" Current value: self.server_args.mem_fraction_static={i.mem_fraction_static}"
    elif i.line.rest_error and i.mem_fraction_static is not None:
        msg += f" Current value: mem_fraction_static={i.mem_fraction_static}"
    return msg


def sglang_pool(model: ModelSpec, plan: ParallelPlan, stages: list[StageSpecs], i: SglangInputs) -> SglangPool:
    """SGLang's ``max_total_num_tokens`` and buffers: the smallest over PP stages."""
    split = splits_swa(model, i.line)
    cells = [stage_cell(st, i.line, split) for st in stages]
    rest = i.budget_bytes
    if rest is None:
        raise PlanError(f"SGLang's pool needs {named('gpu')}, {named('gpu_memory')}, {named('free_before_weights')} or {named('kv_cache_memory')}")
    error: str | None = None
    notes: list[str] = []
    if i.kv_cache_memory is not None:  # the pool's bytes given: leave room for the padding page
        pad = i.page_size if i.line.pad_page else 1
        per_stage = [rest - pad * (c.full + c.swa) for c in cells]
    else:
        per_stage = [rest] * len(cells)
        if i.line.rest_error and rest <= 0:
            error = _rest_error(i)
    results = [stage_tokens(c, i, r) for c, r in zip(cells, per_stage)]
    k = min(range(len(results)), key=lambda j: results[j].full)
    best = results[k]
    if i.max_total_tokens is not None and best.rest // max(cells[k].full + cells[k].swa, 1) < i.max_total_tokens:
        notes.append(f"max_total_tokens={i.max_total_tokens} is larger than the profiled value; SGLang uses the profiled one")
    if error is None and best.full <= 0:
        error = _tokens_error(i)
    if len(stages) > 1:
        notes.append("PP stages size their pools from their own layers; the smallest count is reported")
    running, running_src = max_running_requests(i.line, max(best.full, 0), i.context_len, i.max_running_requests, i.dp)
    if best.mamba_cache_size is not None and i.line.running in (RUN_EST_CAP, RUN_USER) and running > best.mamba_cache_size // 3:
        # 0.5.10+: at most max_mamba_cache_size // 3 requests (radix cache on; 1 with --disable-radix-cache)
        running, running_src = best.mamba_cache_size // 3, f"max_mamba_cache_size {best.mamba_cache_size} // 3"
    if best.full > 0 and best.full < i.context_len:
        notes.append(
            f"SGLang starts, but one request can hold at most {best.full - 1:,} tokens (max_total_num_tokens - 1), "
            f"less than context_len {i.context_len:,}"
        )
    return SglangPool(model, plan, i, cells[k], best.rest, best.full, best.swa, best.mamba_cache_size,
                      running, running_src, error, tuple(notes))


# ---------------------------------------------------------------- what SGLang logs (R5, R7)


def _gb(n: int) -> str:
    return f"{n / GIB:.2f}"


def kv_log_lines(p: SglangPool) -> list[str]:
    """The ``KV Cache is allocated`` line(s) of the release line; none before 0.4.1."""
    line, c = p.inputs.line, p.cell
    if line.kv_log == LOG_NONE or p.error:
        return []
    head = "KV Cache is allocated. "
    if line.kv_log == LOG_DTYPE:
        head += f"dtype: {TORCH_DTYPES.get(p.inputs.kv_dtype, p.inputs.kv_dtype)}, "
    pools = [(p.max_total_num_tokens, c.k_full, c.v_full)]
    if p.swa_tokens is not None:
        pools.append((p.swa_tokens, c.k_swa, c.v_swa))
    out = []
    for tokens, k, v in pools:
        n = tokens + p.pad
        toks = "" if line.kv_log == LOG_KV else f"#tokens: {tokens}, "
        end = "." if line.kv_log == LOG_KV else ""
        if p.model.mla:
            out.append(f"{head}{toks}KV size: {_gb(n * k)} GB{end}")
        else:
            out.append(f"{head}{toks}K size: {_gb(n * k)} GB, V size: {_gb(n * v)} GB{end}")
    return out


def scheduler_line(p: SglangPool, max_prefill_tokens: int = 16384) -> str:
    """The scheduler's summary line, less ``available_gpu_mem`` (measured after CUDA-graph capture)."""
    i = p.inputs
    chunk = "" if i.line.first < (0, 4, 3, 0) else f"chunked_prefill_size={i.chunked_prefill_size}, "
    return (
        f"max_total_num_tokens={p.max_total_num_tokens}, {chunk}max_prefill_tokens={max_prefill_tokens}, "
        f"max_running_requests={p.max_running}, context_len={i.context_len}"
    )


def log_summary(p: SglangPool) -> str:
    """One line for the size/compare tables: the error, or the KV line and max_total_num_tokens."""
    if p.error:
        return p.error
    kv = kv_log_lines(p)
    return (kv[0] + " | " if kv else "") + f"max_total_num_tokens={p.max_total_num_tokens}"


def payload_extra(p: SglangPool) -> dict[str, Any]:
    """SGLang's own figures, added to the ``pool`` JSON object."""
    i = p.inputs
    return {
        "sglang_version": i.sglang_version,
        "sglang_rules": i.rules,
        "mem_fraction_static": i.mem_fraction_static,
        "mem_fraction_static_source": i.mem_fraction_static_source,
        "free_before_weights_bytes": i.free_before,
        "free_after_weights_bytes": i.free_after,
        "rest_bytes": p.rest_bytes,
        "page_size": i.page_size,
        "bytes_per_token": p.cell.full,
        "swa_bytes_per_token": p.cell.swa if p.swa_tokens is not None else None,
        "max_total_num_tokens": p.max_total_num_tokens,
        "swa_tokens": p.swa_tokens,
        "mamba_cache_size": p.mamba_cache_size,
        "mamba_state_bytes_per_request": p.cell.mamba_state or None,
        "k_size_bytes": p.k_bytes,
        "v_size_bytes": p.v_bytes,
        "max_running_requests": p.max_running,
        "max_running_requests_rule": p.max_running_source,
        "context_len": i.context_len,
        "chunked_prefill_size": i.chunked_prefill_size,
        "dp_attention": i.dp_attention,
        "kv_log_lines": kv_log_lines(p),
        "scheduler_line": scheduler_line(p) if not p.error else None,
    }
