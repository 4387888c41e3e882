"""Which model runner the release runs for the model (V1 or V2), from the settings and the config."""

from __future__ import annotations

from kvcalc.app.settings import Settings
from kvcalc.core.budget_rules import runner_v2
from kvcalc.core.mixers import EXPERT_KEYS, arch_int
from kvcalc.core.model import ModelSpec
from kvcalc.core.vllm_rules import RuleLine


def model_runner_v2(line: RuleLine, model: ModelSpec, s: Settings) -> str:
    """Why vLLM runs model runner V2 here ('' for V1): every model from 0.29, before that the release's
    default rule on the architecture, MoE (experts in the config), quantization (the config's
    quantization_config or --quantization) and hybrid (mamba / linear-attention layers)."""
    return "every architecture" if line.v2_for_all else v2_by_default(line, model, s)


def v2_by_default(line: RuleLine, model: ModelSpec, s: Settings) -> str:
    """Why a release before 0.29 picks model runner V2 for this model ('' for V1, and for the 0.29+ lines,
    whose V2 is their own sampler_path and CUDA-graph estimate)."""
    if line.v2_for_all:
        return ""
    a = model.arch
    moe = arch_int(a, *EXPERT_KEYS) > 0
    quantized = s.quantization is not None or isinstance(a.get("quantization_config"), dict)
    return runner_v2(line, a.get("architectures"), moe=moe, quantized=quantized, hybrid="mamba" in model.kinds)
