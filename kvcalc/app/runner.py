"""Which model runner the release runs for the model (V1 or V2), from the settings and the config."""

from __future__ import annotations

from kvcalc.app.settings import Settings
from kvcalc.core.budget_rules import runner_v2
from kvcalc.core.model import ModelSpec
from kvcalc.core.vllm_rules import RuleLine
from kvcalc.core.weights import arch_int


def model_runner_v2(line: RuleLine, model: ModelSpec, s: Settings) -> str:
    """Why vLLM runs model runner V2 here ('' for V1): every model from 0.29, before that the release's
    default rule on the architecture, MoE (experts in the config), quantization (the config's
    quantization_config or --quantization) and hybrid (mamba / linear-attention layers)."""
    if line.v2_for_all:
        return "every architecture"
    a = model.arch
    moe = arch_int(a, "n_routed_experts", "num_experts", "num_local_experts") > 0
    quantized = s.quantization is not None or isinstance(a.get("quantization_config"), dict)
    return runner_v2(line, a.get("architectures"), moe=moe, quantized=quantized, hybrid="mamba" in model.kinds)
