"""Release strings a user pastes -> the vLLM rule line they belong to (kvcalc/core/vllm_rules.py).

The boundaries asserted here were read in the published wheels on both sides (the file and
line of each is cited in docs/vllm-releases.md), e.g. "GPU KV cache size" switched from
blocks // groups x block size to int(concurrency x max_model_len) between 0.20.0 and 0.20.1
(vllm==0.20.0: vllm/v1/core/kv_cache_utils.py:1694 vs vllm==0.20.1: :1706).
"""

from __future__ import annotations

import pytest

from kvcalc.core import vllm_rules as R
from kvcalc.errors import PlanError


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("0.10.1.1", (0, 10, 1, 1)),
        ("v0.22.0", (0, 22, 0)),
        ("0.26.1rc1.dev156+g0eec856cc.d20260731", (0, 26, 1)),
        ("0.33", (0, 33)),
        ("0.8.5.post1", (0, 8, 5)),
        ("0.9.0.1", (0, 9, 0, 1)),
        (" 0.11.0 ", (0, 11, 0)),
    ],
)
def test_release_strings_users_paste(text, release):
    assert R.parse_release(text) == release


@pytest.mark.parametrize("text", ["", "abc", "latest", "0..1", "v", "0.x"])
def test_not_a_release_is_refused_naming_the_flag(text):
    with pytest.raises(PlanError) as exc:
        R.parse_release(text)
    assert str(exc.value).startswith("--vllm-version")


@pytest.mark.parametrize("text", ["0.7.3", "0.6.3.post1", "0.5.0"])
def test_releases_before_the_v1_engine_are_refused(text):
    with pytest.raises(PlanError, match="predates vLLM's V1 engine; kvcalc has the rules of 0.8.0 and later"):
        R.rules_for(text)


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("0.19.1", "0.19.0–0.19.x"),
        ("0.20.0", "0.20.0"),
        ("0.20.2", "0.20.1–0.20.x"),  # 0.20.1 keeps the Triton top-k/top-p default; 0.21.0 turns FlashInfer on
        ("0.21.3", "0.21.0–0.21.x"),
        ("0.24.0", "0.24.0–0.24.x"),  # model runner V2 default architectures differ per release (0.22-0.25)
        ("0.10.1.1", "0.10.1"),  # 0.9.2 and 0.10.0 are lines of their own (chunked-local, mamba)
        ("0.10.2", "0.10.2–0.10.x"),  # torch 2.8.0: the MXFP4 kernel choice changes
        ("0.9.2", "0.9.2"),
        ("0.10.0", "0.10.0"),
        ("0.15.1", "0.14.0–0.16.x"),
        ("0.8.5.post1", "0.8.5"),
        ("0.33.0", "0.33.0 and later"),
    ],
)
def test_each_release_names_its_line(text, label):
    line, why = R.rules_for(text)
    assert line.label == label
    assert why == f"vLLM {R.show(R.parse_release(text))}: rules of {label}"


def test_a_release_newer_than_any_read_uses_the_newest_with_a_note():
    line, why = R.rules_for("0.41.2")
    assert line is R.CURRENT
    assert "newer than the newest release kvcalc was checked against" in why


def test_the_lines_cover_every_release_once_and_in_order():
    # newest first, contiguous: each line ends right before the next newer one begins
    for newer, older in zip(R.LINES, R.LINES[1:]):
        assert R._pad(older.last) < R._pad(newer.first)
    for text in ("0.8.0", "0.8.2", "0.8.3", "0.8.4", "0.8.5", "0.9.0", "0.9.1", "0.9.2", "0.10.2",
                 "0.11.0", "0.11.1", "0.12.0", "0.13.0", "0.14.0", "0.17.0", "0.18.0", "0.19.0", "0.20.0",
                 "0.20.1", "0.21.0", "0.22.0", "0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.33.0"):
        line, _ = R.rules_for(text)
        assert line.first == R.parse_release(text), text  # every boundary read starts a line


@pytest.mark.parametrize(
    ("older", "newer", "field", "before", "after"),
    [
        # GPU KV cache size (docs/vllm-releases.md section 1)
        ("0.9.0.1", "0.9.1", "tokens", R.TOKENS_BLOCKS, R.TOKENS_PER_GROUP),
        ("0.10.2", "0.11.0", "tokens", R.TOKENS_PER_GROUP, R.TOKENS_PER_GROUP_MIN_BS),
        # MXFP4 MoE kernel of a pip install (docs/vllm-budget.md, gpt-oss weights)
        ("0.10.1.1", "0.10.2", "mxfp4_kernel", R.MXFP4_TORCH27, R.MXFP4_NO_TRITON_KERNELS),
        ("0.11.2", "0.12.0", "mxfp4_kernel", R.MXFP4_NO_TRITON_KERNELS, R.MXFP4_VENDORED),
        ("0.20.0", "0.20.1", "tokens", R.TOKENS_PER_GROUP_MIN_BS, R.TOKENS_CONCURRENCY),
        # concurrency (section 2)
        ("0.9.0.1", "0.9.1", "concurrency", R.CONC_TOKENS, R.CONC_POOLED),
        ("0.26.0", "0.27.0", "concurrency", R.CONC_POOLED, R.CONC_PER_GROUP),
        # sliding-window reservation (section 3)
        ("0.8.2", "0.8.3", "sliding", R.SW_ALL_FULL, R.SW_BATCHED),
        ("0.25.1", "0.26.0", "sliding", R.SW_BATCHED, R.SW_IN_FLIGHT),
        ("0.27.1", "0.28.0", "sliding", R.SW_IN_FLIGHT, R.SW_RETAINED),
        # fit check (section 4)
        ("0.8.1", "0.8.2", "fit_check", R.FIT_MIN_ALL, R.FIT_WORKER),
        ("0.13.0", "0.14.0", "fit_check", R.FIT_WORKER, R.FIT_WHOLE_MODEL),
        ("0.16.0", "0.17.0", "fit_check", R.FIT_WHOLE_MODEL, R.FIT_FIRST_GROUP),
        ("0.18.0", "0.19.0", "fit_check", R.FIT_FIRST_GROUP, R.FIT_GROUPS),
        ("0.28.0", "0.29.0", "fit_check", R.FIT_GROUPS, R.FIT_NULL_BLOCK),
        # logs (section 6)
        ("0.11.0", "0.11.1", "log", R.LOG_PER_WORKER, R.LOG_AFTER_MIN),
        ("0.27.1", "0.28.0", "log", R.LOG_AFTER_MIN, R.LOG_COMBINED),
        ("0.29.0", "0.30.0", "log", R.LOG_COMBINED, R.LOG_DEVICE),
        # messages (section 5)
        ("0.21.0", "0.22.0", "fit_whose", "models's", "model's"),
        ("0.12.0", "0.13.0", "docs_url", False, True),
        ("0.8.2", "0.8.3", "fit_gib_unit", "GB", "GiB"),
        ("0.9.0.1", "0.9.1", "fit_estimate", "blank", "shown"),
        # the null block, the hybrid manager, group sizes, the override in 0.9.1
        ("0.8.2", "0.8.3", "null_block", False, True),
        ("0.9.0.1", "0.9.1", "hybrid_groups", False, True),
        ("0.11.2", "0.12.0", "group_ratio", 0, 125),
        ("0.17.1", "0.18.0", "group_ratio", 125, 150),
        ("0.9.1", "0.9.2", "override_applied", False, True),
        # budget: the utilization default and the CUDA-graph estimate (docs/vllm-budget.md 2.1, 2.5)
        ("0.19.1", "0.20.0", "default_utilization", 0.9, 0.92),
        ("0.19.1", "0.20.0", "cudagraphs_subtracted", False, True),
        ("0.13.0", "0.14.0", "request_ceil", False, True),
        # scheduler defaults (section 8)
        ("0.8.5", "0.9.0", "batch_defaults", R.BATCH_70GIB, R.BATCH_70GIB_NO_A100),
        ("0.27.1", "0.28.0", "batch_defaults", R.BATCH_70GIB_NO_A100, R.BATCH_160GIB),
        ("0.32.0", "0.33.0", "batch_defaults", R.BATCH_160GIB, R.BATCH_160GIB_NO_GB10),
    ],
)
def test_each_boundary_read_in_the_wheels(older, newer, field, before, after):
    assert getattr(R.rules_for(older)[0], field) == before
    assert getattr(R.rules_for(newer)[0], field) == after


@pytest.mark.parametrize(
    ("text", "label"),
    [("0.20", "0.20.1–0.20.x"), ("0.8", "0.8.5"), ("0.33", "0.33.0 and later"), ("0.11", "0.11.1–0.11.x")],
)
def test_a_bare_minor_release_reads_as_its_newest_patch_level(text, label):
    # "0.20" has always meant 0.20.2's rules in kvcalc: a bare X.Y is the newest X.Y.z kvcalc knows
    line, why = R.rules_for(text)
    assert line.label == label
    assert why == f"vLLM {text} (read as {text}.x, its newest patch level): rules of {label}"


def test_chunked_and_mamba_boundaries():
    # ChunkedLocalAttentionSpec first appears in 0.10.0 (vllm==0.10.0: vllm/v1/kv_cache_interface.py:153);
    # 0.10.1-0.13.0 switch the hybrid manager off when chunked-local layers exist (vllm==0.10.1:
    # vllm/config/__init__.py:3675, default VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE "0").
    assert R.rules_for("0.9.2")[0].chunked == R.CHUNKED_FULL
    assert R.rules_for("0.10.0")[0].chunked == R.CHUNKED_HYBRID
    assert R.rules_for("0.10.1.1")[0].chunked == R.CHUNKED_PROMOTED
    assert R.rules_for("0.13.0")[0].chunked == R.CHUNKED_PROMOTED
    assert R.rules_for("0.14.0")[0].chunked == R.CHUNKED_HYBRID
    assert R.rules_for("0.9.2")[0].mamba_align == R.MAMBA_NONE
    assert R.rules_for("0.10.0")[0].mamba_align == R.MAMBA_16
    assert R.rules_for("0.20.0")[0].mamba_align == R.MAMBA_BLOCK
    assert R.rules_for("0.27.0")[0].mamba_align == R.MAMBA_MLA128


@pytest.mark.parametrize(
    ("yaml_value", "release"),
    [(0.2, "0.20"), (0.1, "0.10"), (0.3, "0.30"), (0.8, "0.8"), (0.9, "0.9"), (0.33, "0.33"), (0.15, "0.15"),
     ("0.10.1.1", "0.10.1.1"), (" v0.22.0 ", "v0.22.0")],
)
def test_gate_files_take_any_release(yaml_value, release):
    # YAML reads an unquoted 0.20 as the number 0.2: the gate key restores the release's spelling
    from kvcalc.app.gate_schema import setting_value

    assert setting_value("vllm_version", yaml_value) == release
    R.rules_for(release)  # and the rules know it
