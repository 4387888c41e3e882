"""Hypothesis strategies shared by the property tests: model specs built directly from
LayerArch (every cache kind kvcalc models), parallel plans, cache settings and traffic."""

from __future__ import annotations

from hypothesis import strategies as st

from kvcalc.core.dtypes import KV_DTYPES
from kvcalc.core.footprint import CacheSettings, Traffic
from kvcalc.core.model import LayerArch, ModelSpec, StateArch
from kvcalc.core.plan import ParallelPlan

HEAD_SIZES = (32, 64, 80, 96, 128, 256)
ATTN_DTYPES = [d for d in KV_DTYPES.values() if not d.mla_only]


@st.composite
def models(draw, *, kinds=("full", "sliding", "chunked"), mla=None, cross=None, mamba=None, max_layers=12):  # noqa: ANN001, ANN201
    """A decoder (or encoder-decoder) ModelSpec. kinds: self-attention kinds to mix;
    mla/cross/mamba: True, False or None (draw it)."""
    n = draw(st.integers(1, max_layers))
    kv = draw(st.sampled_from((1, 2, 3, 4, 8)))
    group = draw(st.sampled_from((1, 2, 4)))
    heads = kv * group
    hs = draw(st.sampled_from(HEAD_SIZES))
    is_mla = draw(st.booleans()) if mla is None else mla
    has_cross = (not is_mla and draw(st.booleans())) if cross is None else cross
    has_mamba = (not is_mla and not has_cross and draw(st.booleans())) if mamba is None else mamba
    layers: list[LayerArch] = []
    divisors: tuple = ()
    state: tuple = ()
    if has_mamba:
        inner = draw(st.sampled_from((64, 128, 256)))
        state = (
            StateArch((inner, draw(st.integers(1, 4))), 0, "conv"),
            StateArch((inner, draw(st.sampled_from((8, 16)))), 0, "ssm"),
        )
        divisors = (("mamba inner channels", inner),)
    enc = draw(st.integers(1, 1600))
    for i in range(n):
        if has_mamba and draw(st.booleans()):
            layers.append(LayerArch(i, "mamba", state=state))
        elif is_mla:
            layers.append(LayerArch(i, "mla", 1, draw(st.sampled_from((576, 320, 192))), 0))
        else:
            kind = draw(st.sampled_from(kinds))
            window = draw(st.integers(1, 600)) if kind in ("sliding", "chunked") else 0
            layers.append(LayerArch(i, kind, kv, hs, hs, window=window))
        if has_cross:
            layers.append(LayerArch(i, "cross", kv, hs, hs, window=enc))
    return ModelSpec(
        name="generated",
        source="hypothesis",
        model_type="generated",
        num_layers=n,
        num_attention_heads=heads,
        num_kv_heads=1 if is_mla else kv,
        head_dim=layers[0].head_size,
        head_dim_v=0 if is_mla else hs,
        dtype=draw(st.sampled_from(("bfloat16", "float16", "float32"))),
        layers=tuple(layers),
        max_model_len=draw(st.integers(16, 1 << 17)),
        mla=is_mla,
        encoder_decoder=has_cross,
        tp_divisors=divisors,
    )


@st.composite
def partitions(draw, n: int, pp: int):  # noqa: ANN001, ANN201
    """pp non-negative counts summing to n (VLLM_PP_LAYER_PARTITION may hold zeros)."""
    cuts = sorted(draw(st.lists(st.integers(0, n), min_size=pp - 1, max_size=pp - 1)))
    bounds = [0, *cuts, n]
    return tuple(bounds[i + 1] - bounds[i] for i in range(pp))


@st.composite
def plans(draw, model: ModelSpec, *, tps=(1, 2, 3, 4, 8, 16), explicit=None):  # noqa: ANN001, ANN201
    """A plan; TP drawn freely (it may not fit the model: footprint then raises PlanError)."""
    tp = draw(st.sampled_from(tps))
    pp = draw(st.integers(1, min(4, model.num_layers)))
    use_part = draw(st.booleans()) if explicit is None else explicit
    part = draw(partitions(model.num_layers, pp)) if use_part else None
    return ParallelPlan(tp=tp, pp=pp, dp=draw(st.integers(1, 2)), pp_layers=part)


@st.composite
def caches(draw, model: ModelSpec, dtypes=None):  # noqa: ANN001, ANN201
    pool = list(KV_DTYPES.values()) if model.mla else ATTN_DTYPES
    dt = draw(st.sampled_from(dtypes or pool))
    return CacheSettings(
        kv_dtype=dt,
        block_size=draw(st.sampled_from((1, 2, 3, 7, 16, 32, 64, 128))),
        mamba_dtype_bytes=draw(st.sampled_from((2, 4))),
        mamba_ssm_dtype_bytes=draw(st.sampled_from((2, 4))),
        num_speculative_blocks=draw(st.integers(0, 2)),
    )


def traffics(max_requests: int = 6, max_tokens: int = 5000):  # noqa: ANN201
    return st.lists(st.integers(0, max_tokens), min_size=0, max_size=max_requests).map(lambda r: Traffic(tuple(r)))
