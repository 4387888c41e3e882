"""The weights term of vLLM's budget: on one GPU of each PP stage, from the checkpoint's safetensors bytes,
--weights-bytes or the config's estimate (kvcalc.core.weights), with a drafter's on the last stage."""

from __future__ import annotations

from typing import Any

from kvcalc.app.budget_gpu import optional_size
from kvcalc.app.mm_encoder import towers_off
from kvcalc.app.settings import Settings
from kvcalc.core.dtypes import MODEL_DTYPES
from kvcalc.core.model import ModelSpec
from kvcalc.core.plan import ParallelPlan
from kvcalc.core.quant import QUANTIZATIONS
from kvcalc.core.speculative import unloaded_bytes
from kvcalc.core.towers import mrope_rows_factor
from kvcalc.core.units import format_bytes
from kvcalc.core.vllm_rules import parse_release
from kvcalc.core.weights import estimate_weights
from kvcalc.errors import PlanError, named


def weights_per_stage(
    s: Settings, model: ModelSpec, plan: ParallelPlan, checkpoint: dict | None, dtype_bytes: int = 0, mxfp4: str = "",
    vllm_extras: bool = True, fp8_marlin: bool = False,
) -> tuple[tuple[int, ...], str]:
    """Weights on one GPU of each PP stage, and their source. ``dtype_bytes``: the model dtype's size after
    --dtype. ``mxfp4``: the MoE kernel whose layout the release gives MXFP4 experts on this GPU
    (core.quant.mxfp4_kernel). ``vllm_extras``: vLLM's RoPE table and vision towers; SGLang passes False.
    A drafter's weights (speculative decoding) join the last stage, unless the checkpoint's bytes hold them."""
    weights, how, one = _target_weights(s, model, plan, checkpoint, dtype_bytes, mxfp4, vllm_extras, fp8_marlin)
    in_checkpoint = model.drafter_method == "mtp" and bool(checkpoint and checkpoint.get("bytes"))
    if not model.drafter_method or s.weights_bytes is not None or in_checkpoint:
        return weights, how
    from kvcalc.app.speculation import drafter_weights

    extra, extra_how = drafter_weights(model, plan.tp, dtype_bytes or MODEL_DTYPES[model.dtype], one)
    return ((*weights[:-1], weights[-1] + extra), f"{how} {extra_how}") if extra else (weights, how)


def _target_weights(
    s: Settings, model: ModelSpec, plan: ParallelPlan, checkpoint: dict | None, dtype_bytes: int, mxfp4: str,
    vllm_extras: bool, fp8_marlin: bool,
) -> tuple[tuple[int, ...], str, Any]:
    """The target model's weights per stage, their source, and the one-stage estimate at a TP size (for a drafter)."""
    quant = quantization(s)
    dtype = None
    if s.dtype not in (None, "auto") and dtype_bytes and dtype_bytes != MODEL_DTYPES[model.dtype]:
        dtype = next(name for name, size in MODEL_DTYPES.items() if size == dtype_bytes)
    ep = plan.tp * plan.dp if s.enable_expert_parallel and vllm_extras else None
    kw: dict[str, Any] = dict(mxfp4_kernel=mxfp4, dtype=dtype, vllm_extras=vllm_extras, fp8_marlin=fp8_marlin,
                              towers_off=vllm_extras and towers_off(s, model), expandable=bool(s.expandable_segments),
                              mrope_factor=mrope_rows_factor(model.arch, parse_release(str(s.vllm_version).strip())))
    est = estimate_weights(model, plan, quant, expert_ranks=ep, **kw)
    one = lambda m, tp: estimate_weights(m, ParallelPlan(tp=tp), quant, expert_ranks=ep, **kw).bytes_per_stage[0]  # noqa: E731
    how_tail = f"; experts whole across {ep} ranks (expert parallelism)" if ep else ""
    how_tail += "; expandable segments: no allocator slack" if s.expandable_segments and vllm_extras else ""
    weights_flag = optional_size(s.weights_bytes, named("weights_bytes"))
    if weights_flag is None and not (checkpoint and checkpoint.get("bytes")):
        return est.bytes_per_stage, f"{est.method}{how_tail}: {est.parameters:,} parameters (pass --weights-bytes for the exact figure)", one
    if weights_flag is not None:
        whole, src = weights_flag, "--weights-bytes"
    else:
        assert checkpoint is not None  # the condition above
        whole, src = int(checkpoint["bytes"]), f"checkpoint metadata ({checkpoint.get('source', 'safetensors')})"
        skipped = unloaded_bytes(checkpoint, model.num_layers, model.drafter_method)
        if skipped:  # MTP modules vLLM loads only with speculative decoding
            whole -= skipped
            src += f", less {format_bytes(skipped)} of MTP modules vLLM skips without --speculative-config"
        elif model.drafter_method == "mtp":
            src += " (with its MTP modules)"
    # the whole model as the TP-sliced estimate counts it, so an expert-parallel split keeps its own proportions
    sliced = estimate_weights(model, plan, quant, **kw) if ep else est
    est_total = sum(sliced.bytes_per_stage) * plan.tp or 1
    weights = tuple(round(whole * b / est_total) for b in est.bytes_per_stage)
    src += how_tail
    if plan.world_size // plan.dp > 1:
        src += ", split across ranks in the estimate's proportions"
    return weights, src, one


def quantization(s: Settings) -> str | None:
    """--quantization as vLLM spells it (checked), or None."""
    q = s.quantization
    if q is None:
        return None
    key = str(q).strip().lower()
    if key not in QUANTIZATIONS:
        raise PlanError(f"{named('quantization')} {q!r} is not known; valid: {', '.join(QUANTIZATIONS)}")
    return key
