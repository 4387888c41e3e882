"""Generate tests/data/vllm033-planning-vectors.json OFFLINE by running vLLM 0.33.0's own KV
planning code (get_global_kv_cache_groups, get_kv_cache_configs, get_max_concurrency_for_kv_cache_config,
the fit check and its estimated length; vllm/v1/core/kv_cache_planning.py and kv_cache_utils.py
from the vllm==0.33.0 wheel) on random configurations. The test suite only reads the JSON.

    /tmp/venv-vllm/bin/pip install torch==2.13.0          # CPU wheel; plus kvcalc on the path
    VLLM_SRC=/work/vllm-src/0.33.0 /tmp/venv-vllm/bin/python scripts/vllm033_vectors.py [N] [SEED]

The per-layer specs handed to vLLM are built from kvcalc's per-layer shapes (heads, head size,
window, chunk, state tensors, dtype bytes): the vectors check the planning (grouping, bytes per
block, blocks, concurrency, token figure, fit check, estimated length, refusals), not the
reading of config.json.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402, TID253  (an offline script, not the package)
import vllm033_harness  # noqa: E402

vllm033_harness.install()

import vllm.platforms  # noqa: E402  (stubs)
import vllm.v1.core.kv_cache_config_builder as B  # noqa: E402
import vllm.v1.core.kv_cache_planning as P  # noqa: E402
import vllm.v1.core.kv_cache_utils as U  # noqa: E402
import vllm.v1.kv_cache_interface as I  # noqa: E402
from vllm.v1.kv_cache_layout import KVCacheLayout as LAYOUT  # noqa: E402

from kvcalc.core import specs as K  # noqa: E402

B.resolve_obj_by_qualname = lambda q: P.DefaultKVCacheConfigBuilder  # the default builder (CUDA)
vllm.platforms.current_platform = SimpleNamespace(get_kv_cache_config_builder_cls=lambda c: "default")

def _register_builtin_specs() -> None:
    """vLLM's built-in spec registration (vllm==0.33.0: vllm/v1/core/single_type_kv_cache_manager.py
    register_all_kvcache_specs), with placeholder managers: planning needs only the base specs."""
    from vllm.v1.kv_cache_spec_registry import KVCacheSpecRegistry as Reg

    for spec, base in (
        (I.FullAttentionSpec, I.FullAttentionSpec), (I.SlidingWindowSpec, I.SlidingWindowSpec),
        (I.MambaSpec, I.MambaSpec), (I.ChunkedLocalAttentionSpec, I.ChunkedLocalAttentionSpec),
        (I.CrossAttentionSpec, I.CrossAttentionSpec), (I.MLAAttentionSpec, I.FullAttentionSpec),
    ):
        Reg.register(spec, type(f"{spec.__name__}Manager", (), {}), uniform_type_base_spec=base)


_register_builtin_specs()

DTYPES = {1: torch.float8_e4m3fn, 2: torch.bfloat16, 4: torch.float32}
MAMBA_DTYPES = {2: torch.bfloat16, 4: torch.float32, 1: torch.float8_e4m3fn}
GIB = 1 << 30


def vllm_spec(s: K.CacheSpec):
    """The vLLM 0.33 spec of a kvcalc layer spec (None: not converted)."""
    if isinstance(s, K.MambaSpec):
        return I.MambaSpec(
            block_size=s.block_size,
            shapes=tuple(tuple(t.shape) for t in s.tensors),
            dtypes=tuple(MAMBA_DTYPES[t.dtype_bytes] for t in s.tensors),
            page_size_padded=s.page_size_padded or None,
        )
    if s.scale_bytes_per_head or s.token_bytes_override or s.page_size_padded:
        return None
    common = dict(block_size=s.block_size, num_kv_heads=s.num_kv_heads, head_size=s.head_size,
                  dtype=DTYPES[s.dtype_bytes])
    if isinstance(s, K.MLASpec):
        return I.MLAAttentionSpec(**common)
    if isinstance(s, K.SlidingWindowSpec):
        return I.SlidingWindowSpec(**common, head_size_v=s.head_size_v, sliding_window=s.window)
    if isinstance(s, K.ChunkedLocalSpec):
        return I.ChunkedLocalAttentionSpec(**common, head_size_v=s.head_size_v, attention_chunk_size=s.chunk)
    if isinstance(s, K.CrossAttentionSpec):
        return I.CrossAttentionSpec(**common, head_size_v=s.head_size_v)
    return I.FullAttentionSpec(**common, head_size_v=s.head_size_v)


def config(L: int, mnbt: int, pp: int, tp: int, disable_hybrid: bool = False, override: int | None = None):
    return SimpleNamespace(
        model_config=SimpleNamespace(max_model_len=L, original_max_model_len=L, supports_kv_cache_grouping=False),
        # the layout vLLM 0.33 resolves for FlashAttention on CUDA (layer-outermost, as kvcalc's probe/alloc.py)
        cache_config=SimpleNamespace(num_gpu_blocks_override=override, prefix_cache_retention_interval=None,
                                     get_resolved_kv_cache_layout=lambda: LAYOUT.LBNHC, kv_cache_layout="LBNHC",
                                     mamba_cache_mode="none"),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=mnbt, max_num_encoder_input_tokens=mnbt,
                                         disable_hybrid_kv_cache_manager=disable_hybrid, async_scheduling=True),
        parallel_config=SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                                        decode_context_parallel_size=1, prefill_context_parallel_size=1),
        device_config=SimpleNamespace(device_type="cuda"),
        attention_config=SimpleNamespace(hisparse_config=None),
        speculative_config=None,
        num_prefill_lookahead_tokens=0,
        max_concurrent_batches=pp + 1,
        max_in_flight_tokens=(pp + 1) * mnbt,
    )


def run_vllm(worker_specs: list[dict], available: list[int], L: int, mnbt: int, pp: int, tp: int,
             disable_hybrid: bool = False, override: int | None = None) -> dict:
    cfg = config(L, mnbt, pp, tp, disable_hybrid, override)
    builder = P.DefaultKVCacheConfigBuilder()
    try:
        groups = P.get_global_kv_cache_groups(cfg, worker_specs)
        configs = P.get_kv_cache_configs(cfg, worker_specs, available, groups)
    except (ValueError, NotImplementedError, AssertionError) as exc:
        return {"refused": str(exc), "error_type": type(exc).__name__}
    sched = U.generate_scheduler_kv_cache_config(configs)
    conc = U.get_max_concurrency_for_kv_cache_config(cfg, sched)
    projected = [P._project_kv_cache_groups_to_worker(groups, ws) for ws in worker_specs]
    bpb = [P._pool_bytes_per_block_from_builder(builder, cfg, g) for g in projected]
    if override is not None:
        available = [override * b for b in bpb]
    estimate = min(P._estimate_max_model_len_from_groups(builder, cfg, g, a - b) for g, a, b in zip(projected, available, bpb))
    return {
        "num_blocks": sched.num_blocks,
        "bytes_per_block": bpb,
        "num_groups": len(groups),
        "max_concurrency": conc,
        "kv_cache_size_tokens": int(conc * L),
        "estimated_max_model_len": estimate,
    }


def case(rng: random.Random, presets: list[str]) -> dict | None:
    from kvcalc.app.service import cache_settings, default_block_size, plan
    from kvcalc.core.footprint import stage_specs
    from kvcalc.core.pool import engine_cache
    from kvcalc.sources.resolve import resolve

    name = rng.choice(presets)
    model = resolve(name).spec
    if not model.vllm_supported:
        return None
    tp = rng.choice([1, 2, 4, 8])
    pp = rng.choice([1, 1, 2, 3, 4])
    if pp > model.num_layers:
        return None
    kv = rng.choice(["auto", "fp8"]) if not model.encoder_decoder else "auto"
    block = rng.choice([16, 32, 64, 128])
    from kvcalc.app.settings import Settings

    # the planning is handed mamba_cache_mode "none" below: prefix caching off, as the vectors were made
    s = Settings(tp=tp, pp=pp, kv_dtype=kv, block_size=block, enable_prefix_caching=False)  # type: ignore[call-arg]
    try:
        cache = cache_settings(model, s, block_size=default_block_size(model, s))
        p = plan(s)
        cache, mamba_pad, _ = engine_cache(model, p, cache)
        stages = stage_specs(model, p, cache)
    except Exception:  # kvcalc refuses (TP does not divide a mamba state, ...): not a planning case
        return None
    kv_specs, vllm_specs = [], []
    for st in stages:
        mine, theirs = {}, {}
        for layer, spec in st.specs:
            if mamba_pad and isinstance(spec, K.MambaSpec):
                spec = spec.with_padding(mamba_pad)
            v = vllm_spec(spec)
            if v is None:
                return None
            key = f"layers.{layer.layer}.{layer.kind}"
            mine[key], theirs[key] = spec, v
        kv_specs.append(mine)
        vllm_specs.append(theirs)
    L = rng.randint(1, model.max_model_len)
    mnbt = rng.choice([512, 2048, 8192])
    scale = rng.choice([2**20, 2**26, 2**30, 10 * 2**30, 80 * 2**30])
    available = [rng.randint(scale // 2, scale) if rng.random() < 0.6 else rng.randint(1, scale) for _ in stages]
    disable_hybrid = rng.random() < 0.15
    override = rng.randint(1, 5000) if rng.random() < 0.1 else None
    vllm_specs = [{k: v for k, v in ws.items()} for ws in vllm_specs]  # unify_hybrid_kv_cache_specs edits in place
    result = run_vllm(vllm_specs, available, L, mnbt, pp, tp, disable_hybrid, override)
    return {
        "inputs": {"preset": name, "tp": tp, "pp": pp, "kv_dtype": kv, "block_size": block, "max_model_len": L,
                   "max_num_batched_tokens": mnbt, "max_concurrent_batches": pp + 1, "available": available,
                   "disable_hybrid_kv_cache_manager": disable_hybrid, "num_gpu_blocks_override": override},
        "vllm": result,
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 13
    rng = random.Random(seed)
    presets = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "presets").glob("*.json") if p.stem != "index")
    cases: list[dict] = []
    tries = 0
    while len(cases) < n and tries < 50 * n:
        tries += 1
        c = case(rng, presets)
        if c is not None:
            cases.append(c)
    out = Path(__file__).resolve().parents[1] / "tests" / "data" / "vllm033-planning-vectors.json"
    out.write_text(json.dumps({
        "provenance": ("computed by vLLM 0.33.0's own planning code (vllm==0.33.0 wheel: vllm/v1/core/kv_cache_planning.py "
                       "get_global_kv_cache_groups, get_kv_cache_configs, _estimate_max_model_len_from_groups; "
                       "vllm/v1/core/kv_cache_utils.py get_max_concurrency_for_kv_cache_config) run on CPU torch 2.13 "
                       f"by scripts/vllm033_vectors.py (seed {seed}); per-layer specs from kvcalc's shapes"),
        "cases": cases,
    }, indent=1) + "\n")
    print(f"{len(cases)} cases -> {out}")


if __name__ == "__main__":
    main()
