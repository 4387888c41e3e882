"""Regenerate presets/ from a folder of published config.json copies named ORG--NAME.json
(``python3 scripts/make_presets.py CONFIG_DIR``, run from the repository root).

Each preset keeps the published config.json values verbatim under "config", with the
provenance from SOURCES.md under "source". Partial copies get back the published field
SOURCES.md names, and the record says what was restored or dropped.
"""

import json
import sys
from pathlib import Path

if len(sys.argv) != 2:
    sys.exit("usage: python3 scripts/make_presets.py CONFIG_DIR")
SHARED = Path(sys.argv[1])
OUT = Path("presets")

# file stem -> (preset name, hub id, aliases, source line, notes, edits)
A = "ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/model_configs at 095f58a51c4c"
M = "mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py at 79d603f085f5"
L = "citsjtu2020/LLM-Prof sglang/Model_Config.md at 8434c8d19c39"
# Llama-4-Scout's vision_config, which the 095f58a51c4c copy lacks: the same file at a later commit
SCOUT_VISION_SOURCE = (
    "from ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/model_configs/"
    "meta-llama--Llama-4-Scout-17B-16E-Instruct_config.json at 64c5ddb697dd (the same text_config as this copy; "
    "trimmed at 095f58a51c4c)"
)
SCOUT_VISION = {
    "attention_dropout": 0.0, "hidden_act": "gelu", "hidden_size": 1408, "image_size": 336,
    "initializer_range": 0.02, "intermediate_size": 5632, "model_type": "llama4_vision_model",
    "multi_modal_projector_bias": False, "norm_eps": 1e-05, "num_attention_heads": 16, "num_channels": 3,
    "num_hidden_layers": 34, "patch_size": 14, "pixel_shuffle_ratio": 0.5, "projector_dropout": 0.0,
    "projector_input_dim": 4096, "projector_output_dim": 4096, "rope_theta": 10000, "torch_dtype": "bfloat16",
    "vision_feature_layer": -1, "vision_feature_select_strategy": "default", "vision_output_dim": 4096,
}
TABLE = {
    "Qwen--Qwen3-0.6B": ("qwen3-0.6b", [], f"{A}; identical to {M} qwen3_0.6b", []),
    "Qwen--Qwen3-8B": ("qwen3-8b", [], f"{A}; identical to {L}", []),
    "Qwen--Qwen3-32B": ("qwen3-32b", [], f"{A}; identical to {L}", []),
    "Qwen--Qwen3-30B-A3B": ("qwen3-30b-a3b", [], f"{A}; identical to {L}", []),
    "Qwen--Qwen3-235B-A22B": ("qwen3-235b-a22b", [], A, []),
    "Qwen--Qwen2.5-7B": ("qwen2.5-7b", [], f"{A} (at b5369e1fb89f); identical to {L}", []),
    "Qwen--Qwen2.5-72B": ("qwen2.5-72b", [], f"{A} (at b5369e1fb89f)", []),
    "Qwen--Qwen3-Next-80B-A3B-Thinking": ("qwen3-next-80b-a3b-thinking", ["qwen3-next-80b-a3b", "qwen3-next"], f"{A} (at b5369e1fb89f)", []),
    "meta-llama--Llama-3.1-8B": ("llama-3.1-8b", ["meta-llama-3.1-8b"], f"{A}; identical to {L}", []),
    "meta-llama--Llama-3.1-8B-Instruct": ("llama-3.1-8b-instruct", ["meta-llama-3.1-8b-instruct"], f"{M} llama3_1_8b", []),
    "meta-llama--Llama-3.1-70B": ("llama-3.1-70b", ["meta-llama-3.1-70b"], A, []),
    "meta-llama--Llama-3.1-405B": ("llama-3.1-405b", ["meta-llama-3.1-405b"], A, []),
    "meta-llama--Llama-3.2-1B": ("llama-3.2-1b", [], "MatthewGoldsberry/LLM-Projects Llama-3.2-1B/config.json at bf1733705e94", []),
    "meta-llama--Llama-3.2-3B": ("llama-3.2-3b", [], L, []),
    "mistralai--Mixtral-8x7B-v0.1": ("mixtral-8x7b-v0.1", ["mixtral-8x7b"], f"{A}; identical to {M}", []),
    "deepseek-ai--DeepSeek-V3": ("deepseek-v3", [], A, []),
    "deepseek-ai--DeepSeek-R1": ("deepseek-r1", [], A, []),
    "moonshotai--Kimi-K2-Instruct": ("kimi-k2-instruct", ["kimi-k2"], A, []),
    "openai--gpt-oss-20b": ("gpt-oss-20b", [], A, []),
    "openai--gpt-oss-120b": ("gpt-oss-120b", [], A, []),
    "microsoft--Phi-3-mini-4k-instruct": ("phi-3-mini-4k-instruct", ["phi-3-mini"], "sdpython/onnx-diagnostic hub_data_cached_configs.py at cc937c25e830; identical to NVIDIA/TensorRT-LLM test_modeling_phi3.py", []),
    "google--gemma-3-1b-it": ("gemma-3-1b-it", ["gemma-3-1b"], f"{M} gemma3_1b_it", []),
    "google--gemma-2-9b-it": ("gemma-2-9b-it", ["gemma-2-9b"], f"{M} gemma2_9b (the -it config; the base differs only in torch_dtype)", []),
    "google--gemma-2-27b-it": ("gemma-2-27b-it", ["gemma-2-27b"], f"{M} gemma2_27b (the -it config)", []),
    "bigcode--starcoder2-7b": ("starcoder2-7b", [], f"{M} starcoder2 (7B values)", []),
    "HuggingFaceTB--SmolLM2-135M-Instruct": ("smollm2-135m-instruct", ["smollm2-135m"], f"{M} smollm2_135m", []),
    "ai21labs--Jamba-v0.1": ("jamba-v0.1", ["jamba"], "huggingface.co/models123/Jamba-v0.1 config.json (transformers-native mirror)", []),
    "google--t5-v1_1-base": ("t5-v1_1-base", ["t5-base"], "huggingface.co/lintang/t5-v1_1-base-flan at d44c4cff286b (original Google conversion)", []),
    "zai-org--GLM-4.7": ("glm-4.7", [], "huggingface.co/zai-org/GLM-4.7 refs/pr/49 config.json", []),
    "meta-llama--Llama-4-Scout-17B-16E-Instruct.partial": ("llama-4-scout-17b-16e-instruct", ["llama-4-scout"], f"{A} (trimmed by the source: text_config lacks no_rope_layers, layer_types; transformers defaults apply)", [("set", "vision_config", SCOUT_VISION, SCOUT_VISION_SOURCE)]),
    "deepseek-ai--DeepSeek-V2-Lite.partial": ("deepseek-v2-lite", [], f"{M} deepseek_v2_lite (trimmed by the source)", [("set", "q_lora_rank", None)]),
    "mistralai--Mistral-7B-v0.1.partial": ("mistral-7b-v0.1", ["mistral-7b"], f"{M} mistral_7b (altered by the source; published sliding_window restored)", [("drop", "sliding_window_size", None), ("drop", "prefill_chunk_size", None), ("drop", "attention_sink_size", None), ("set", "sliding_window", 4096)]),
    "tiiuae--falcon-7b.partial": ("falcon-7b", [], "huggingface.co/ramdhanfirdaus/falcon-7b-finetuned-aings-instructed-delimiter-2 config.json (a fine-tune's re-saved config; architecture fields as the base)", []),
    "openai--whisper-large-v3.partial": ("whisper-large-v3", [], "print(WhisperConfig) of openai/whisper-large-v3 in a distil-whisper training script (architecture values agree with ~8 derivatives)", []),
}


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.json"):  # index.json included
        old.unlink()
    index = {}
    for stem, (name, aliases, source, edits) in TABLE.items():
        path = SHARED / f"{stem}.json"
        cfg = json.loads(path.read_text())
        restored = []
        for op, key, value, *where in edits:
            if op == "drop":
                cfg.pop(key, None)
                restored.append(f"dropped {key} (added by the source, not in the published config)")
            elif where:
                cfg[key] = value
                restored.append(f"restored {key} {where[0]}")
            else:
                cfg[key] = value
                restored.append(f"restored {key}: {json.dumps(value)} (published value, per SOURCES.md)")
        hub_id = stem.replace(".partial", "").replace("--", "/", 1)
        record = {
            "name": name,
            "hub_id": hub_id,
            "aliases": aliases,
            "source": source,
            "partial": stem.endswith(".partial"),
            "restored": restored,
            "config": cfg,
        }
        (OUT / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
        index[name] = {"hub_id": hub_id, "aliases": aliases}
    (OUT / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    print(f"{len(TABLE)} presets written to {OUT}/")


if __name__ == "__main__":
    main()
