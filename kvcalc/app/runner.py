"""Which model runner the release runs for the model (V1 or V2), from the settings and the config."""

from __future__ import annotations

from kvcalc.app.settings import Settings
from kvcalc.core.budget_rules import runner_v2
from kvcalc.core.mixers import EXPERT_KEYS, arch_int
from kvcalc.core.model import ModelSpec
from kvcalc.core.record import replace
from kvcalc.core.speculative import v2_takes
from kvcalc.core.vllm_rules import SAMPLER_FLASHINFER, RuleLine, parse_release


def model_runner_v2(line: RuleLine, model: ModelSpec, s: Settings) -> str:
    """Why vLLM runs model runner V2 here ('' for V1): every model from 0.29, before that the release's
    default rule on the architecture, MoE (experts in the config), quantization (the config's
    quantization_config or --quantization) and hybrid (mamba / linear-attention layers); V1 whatever the
    rule when V2 does not run the speculative method (kvcalc.core.speculative.V2_METHODS)."""
    if drafter_forces_v1(model, s):
        return ""
    return "every architecture" if line.v2_for_all else v2_by_default(line, model, s)


def drafter_forces_v1(model: ModelSpec, s: Settings) -> bool:
    """vLLM falls back to model runner V1 because V2 does not run this speculative method in this release."""
    return bool(model.drafter_method) and not v2_takes(parse_release(str(s.vllm_version)), model.drafter_method)


def effective_line(line: RuleLine, model: ModelSpec, s: Settings) -> RuleLine:
    """The rule line as the runner vLLM picks applies it: a 0.29+ line falls back to V1's dummy sampler (FlashInfer's
    top-k/top-p pass, 14 B per element, read in 0.29.0 whose V1 sampler is 0.28's: v1/sample/ops/topk_topp_sampler.py
    differs in two lines; re-read in 0.30-0.33, still 14 B: vllm==0.33.0 v1/worker/gpu_model_runner.py:6132-6139 calls
    _dummy_sampler_run at profile time, through the same top-k/top-p pass) when the drafter forces V1."""
    if not line.v2_for_all or not drafter_forces_v1(model, s):
        return line
    return replace(line, v2_for_all=False, sampler_path=SAMPLER_FLASHINFER, sampler_bytes=14)


def v2_by_default(line: RuleLine, model: ModelSpec, s: Settings) -> str:
    """Why a release before 0.29 picks model runner V2 for this model ('' for V1, and for the 0.29+ lines,
    whose V2 is their own sampler_path and CUDA-graph estimate)."""
    if line.v2_for_all or drafter_forces_v1(model, s):
        return ""
    a = model.arch
    moe = arch_int(a, *EXPERT_KEYS) > 0
    quantized = s.quantization is not None or isinstance(a.get("quantization_config"), dict)
    return runner_v2(line, a.get("architectures"), moe=moe, quantized=quantized, hybrid="mamba" in model.kinds)
