"""`kvcalc recompute`: docs/design.md section 1 in numbers, every expected value derived by
hand here (docs/design.md prints the same ones: 30 vs 8, 190 vs 42, 270272 vs 2175, 124.26)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli import build_app
from kvcalc.core.recompute import recompute_counts
from kvcalc.errors import KvcalcError


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(build_app(["recompute"]), ["recompute", *args])
    return result.exit_code, result.stdout, result.stderr


def payload(*args: str) -> dict:
    code, out, err = run(*args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_seed_p4_g5_positions_and_scores():
    d = payload("--prompt", "4", "--gen", "5")
    # without cache: prefixes of 4, 5, 6, 7, 8 positions
    assert d["positions"]["without_cache"] == 4 + 5 + 6 + 7 + 8 == 30
    # with cache: 4 prompt positions + y_1..y_4 fed back (y_5 never is)
    assert d["positions"]["with_cache"] == 4 + (5 - 1) == 8
    assert d["positions"]["saved"] == 30 - 8
    assert d["positions"]["ratio"] == 30 / 8
    # dense scores: full squares without cache; a 4x4 prefill + queries reading 5, 6, 7, 8 with cache
    assert d["attention_scores"]["without_cache"] == 4**2 + 5**2 + 6**2 + 7**2 + 8**2 == 190
    assert d["attention_scores"]["with_cache"] == 4**2 + (5 + 6 + 7 + 8) == 42
    assert d["kv"] is None and d["layer_work_avoided"]["layers"] is None
    code, out, _ = run("--prompt", "4", "--gen", "5")
    assert code == 0
    assert "30" in out and "190" in out and "42" in out
    assert "not wall-clock speed-ups" in out


def test_seed_p2048_g128_ratio_124_26():
    c = recompute_counts(2048, 128)
    # G*P + G(G-1)/2 = 128 x 2048 + 128 x 127 / 2 = 262144 + 8128
    assert c.positions_no_cache == 262144 + 8128 == 270272
    # P + G - 1 = 2048 + 127
    assert c.positions_cache == 2175
    assert round(270272 / 2175, 2) == 124.26
    assert round(c.positions_ratio, 2) == 124.26
    d = payload("--prompt", "2048", "--gen", "128")
    assert d["positions"]["without_cache"] == 270272 and d["positions"]["with_cache"] == 2175
    assert round(d["positions"]["ratio"], 2) == 124.26
    # the closed forms agree with the sums written out
    assert d["attention_scores"]["without_cache"] == sum((2048 + g) ** 2 for g in range(128))
    assert d["attention_scores"]["with_cache"] == 2048**2 + sum(2048 + g for g in range(1, 128))
    _, out, _ = run("--prompt", "2048", "--gen", "128")
    assert "124.26x" in out and "not wall-clock" in out


def test_g1_has_no_gain():
    d = payload("--prompt", "7", "--gen", "1")
    # one prefill of 7 positions either way; nothing is fed back
    assert d["positions"] == {"without_cache": 7, "with_cache": 7, "saved": 0, "ratio": 1.0}
    assert d["attention_scores"]["without_cache"] == d["attention_scores"]["with_cache"] == 7 * 7
    _, out, _ = run("--prompt", "7", "--gen", "1")
    assert "saves no positions" in out


def test_continuation_keeps_p_plus_g():
    c = recompute_counts(4, 5, continuation=True)
    # y_5 is fed back once more to keep its K/V: 4 + 5 positions, one more query reading 9
    assert c.positions_cache == 4 + 5
    assert c.scores_cache == 42 + 9
    assert c.positions_no_cache == 30  # the uncached path keeps nothing


def test_model_gives_layers_and_kv_bytes():
    # Qwen3-0.6B: 28 layers, 8 KV heads, head_dim 128, bf16 -> 2 x 28 x 8 x 128 x 2 = 114688 B per token
    d = payload("qwen3-0.6b", "--prompt", "4", "--gen", "5")
    assert d["layer_work_avoided"] == {
        "per_layer": 22,
        "layers": 28,
        "total": 22 * 28,
        "counted": d["layer_work_avoided"]["counted"],
    }
    kv = d["kv"]
    assert kv["positions"] == 8
    assert kv["bytes_per_token"] == 2 * 28 * 8 * 128 * 2
    assert kv["effective_bytes"] == 8 * 114688
    assert kv["block_rounded_bytes"] == 16 * 114688  # 8 positions take one block of 16
    # --model is the same as the argument; with --continuation 9 positions are held
    d2 = payload("--model", "qwen3-0.6b", "--prompt", "4", "--gen", "5", "--continuation")
    assert d2["kv"]["positions"] == 9 and d2["kv"]["effective_bytes"] == 9 * 114688
    code, _, err = run("qwen3-0.6b", "--model", "llama-3.1-8b", "--prompt", "4", "--gen", "5")
    assert code == 2 and err.count("\n") == 1


def test_a_request_longer_than_the_model_is_warned():
    # Qwen3-0.6B's config: max_position_embeddings 40960; P + G - 1 = 40960 positions fit, one more does not
    fits = payload("qwen3-0.6b", "--prompt", "40960", "--gen", "1")
    assert not any(n.startswith("warning:") for n in fits["notes"])
    over = payload("qwen3-0.6b", "--prompt", "40961", "--gen", "1")
    assert over["notes"][0].startswith("warning: a request of 40961 tokens is longer than qwen3-0.6b's maximum length 40960")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--prompt", "-1", "--gen", "5"), "--prompt"),
        (("--prompt", "0", "--gen", "5"), "--prompt"),
        (("--prompt", "4", "--gen", "0"), "--gen"),
        (("--prompt", "4"), "--gen"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, flag):
    code, out, err = run(*args)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and flag in err and "Traceback" not in err


def test_core_rejects_bad_values():
    with pytest.raises(KvcalcError):
        recompute_counts(-1, 5)
    with pytest.raises(KvcalcError):
        recompute_counts(4, 0)
    with pytest.raises(KvcalcError):
        recompute_counts(True, 5)  # type: ignore[arg-type]
