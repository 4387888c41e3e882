"""The fuzzers count a wrong answer as a failure (issue 17): every mutated config is checked
against an independent oracle (tests/kvoracle.py) — the right bytes per token, or refused when
a mutation made a field it reads invalid — and hostile names are checked for control
characters in every output format. The exhaustive sweep is marked slow (and is
scripts/fuzz_configs.py); the default run samples it."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    import kvoracle
except ImportError:  # tests/ imported as a package
    from tests import kvoracle

from kvcalc.app.service import Settings, evaluate
from kvcalc.errors import KvcalcError
from kvcalc.render import render
from kvcalc.render.size import size_document, size_payload
from kvcalc.sources.config import spec_from_config
from kvcalc.sources.presets import all_presets

SCALE = max(1, int(os.environ.get("KVCALC_FUZZ_SCALE", "1")))
PRESETS = {n: p.load()["config"] for n, p in sorted(all_presets(include_user=False).items())}
PLAIN = sorted(n for n, c in PRESETS.items() if kvoracle.covered(c, c))
FIELDS = [
    "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "hidden_size_per_head",
    "sliding_window", "max_position_embeddings", "model_max_length", "seq_length", "intermediate_size", "vocab_size",
]
MUTATIONS = [
    "delete", None, "x", "128", "4096", True, False, -1, 0, 1, 3, 7, 8, 32, 64, 128, 4096, 8.0, 128.0, 4096.0, 7.5,
    0.5, 1e300, float("nan"), float("inf"), 2**41, 2**70, 10**400, [], {}, [128],
]


def kvcalc_answer(cfg: object) -> int | str:
    """What kvcalc says: the bytes per token of `kvcalc size` (default flags), or REFUSE."""
    try:
        spec = spec_from_config(cfg, name="fuzz", source="fuzz")
        payload = size_payload(evaluate(spec, Settings(tokens=1)))
    except KvcalcError as exc:
        assert "\n" not in exc.message and exc.exit_code == 2
        return kvoracle.REFUSE
    return int(payload["bytes_per_token"])


def mutate(cfg: dict, key: str, value: object) -> dict:
    out = json.loads(json.dumps(cfg))
    if isinstance(value, str) and value == "delete":
        out.pop(key, None)
    else:
        out[key] = value
    return out


def check(name: str, key: str, value: object) -> tuple[object, object]:
    cfg = mutate(PRESETS[name], key, value)
    return kvoracle.expected_bytes_per_token(PRESETS[name], cfg), kvcalc_answer(cfg)


def test_the_oracle_agrees_with_every_plain_preset():
    assert len(PLAIN) >= 10, PLAIN
    for name in PLAIN:
        want = kvoracle.expected_bytes_per_token(PRESETS[name], PRESETS[name])
        assert isinstance(want, int) and want == kvcalc_answer(PRESETS[name]), name


@pytest.mark.parametrize(
    "name,key,value,want",
    [
        ("qwen3-0.6b", "head_dim", 128.0, 114688),
        ("qwen3-0.6b", "head_dim", "128", kvoracle.REFUSE),
        ("qwen3-0.6b", "head_dim", True, kvoracle.REFUSE),
        ("qwen3-0.6b", "head_dim", 0, kvoracle.REFUSE),
        ("qwen3-0.6b", "num_key_value_heads", 32, kvoracle.REFUSE),
        ("qwen3-0.6b", "num_key_value_heads", 7, kvoracle.REFUSE),
        ("mistral-7b-v0.1", "sliding_window", "4096", kvoracle.REFUSE),
        ("llama-3.1-8b", "max_position_embeddings", 0, kvoracle.REFUSE),
        ("llama-3.1-8b", "max_position_embeddings", 7.5, kvoracle.REFUSE),
        ("llama-3.1-8b", "num_hidden_layers", 32.0, 131072),
    ],
)
def test_issue_17_wrong_answers_are_caught_by_the_oracle(name, key, value, want):
    expected, got = check(name, key, value)
    assert expected == want and got == want


@settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PLAIN), st.sampled_from(FIELDS), st.one_of(st.sampled_from(MUTATIONS), st.integers(-3, 10**6),
       st.floats(allow_nan=True, allow_infinity=True)))
def test_mutations_give_the_oracles_answer(name, key, value):
    expected, got = check(name, key, value)
    if expected != kvoracle.SKIP:
        assert got == expected, (name, key, value)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("KVCALC_SLOW"), reason="the exhaustive sweep: KVCALC_SLOW=1 (about 15 s)")
def test_every_mutation_gives_the_oracles_answer():
    wrong = []
    for name in PLAIN:
        for key in FIELDS:
            for value in MUTATIONS:
                expected, got = check(name, key, value)
                if expected != kvoracle.SKIP and got != expected:
                    wrong.append((name, key, value, expected, got))
    assert wrong == []


# ------------------------------------------------------------------ hostile names in every format

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
NAMES = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), min_size=1, max_size=20).map(
    lambda s: s + "\n::warning::x\x1b[31m"
)


@settings(max_examples=40 * SCALE, deadline=None)
@given(NAMES)
def test_hostile_model_names_in_every_size_format(name):
    cfg = dict(PRESETS["qwen3-0.6b"], _name_or_path=name)
    result = evaluate(spec_from_config(cfg, name=name, source=f"file {name}"), Settings(tokens=1, gpu="H100-80GB"))
    payload = size_payload(result)
    for fmt in ("table", "markdown"):
        text = render(fmt, payload, size_document(result))
        assert not CONTROL.search(text), fmt
        assert not any(line.startswith("::") for line in text.splitlines()), fmt
    assert json.loads(render("json", payload, None))["model"]["name"] == name


@settings(max_examples=30 * SCALE, deadline=None)
@given(NAMES)
def test_hostile_deployment_names_in_every_gate_format(name):
    from kvcalc.app.gate import evaluate_gate
    from kvcalc.app.gate_schema import validate
    from kvcalc.render import gate as rg

    data = [{"name": name, "model": "qwen3-0.6b", "tokens": 1000, "max_kv_bytes_per_rank": "1KiB"}]
    report = evaluate_gate(validate(data, {}, "cap.yaml"))  # as the YAML would give it (any name YAML can carry)
    human = [
        render("table", rg.gate_payload(report), rg.gate_document(report)),
        rg.markdown_summary(report),
        "\n".join(rg.github_annotations(report)),
        rg.junit_xml(report),
    ]
    for out in human:
        assert not CONTROL.search(out)
    for line in human[2].splitlines():
        assert line.startswith("::error ") and "%0A" not in line.split("::", 2)[1]
    assert ET.fromstring(human[3].split("\n", 1)[1]).get("failures") == "1"
    assert json.loads(render("json", rg.gate_payload(report), None))["results"][0]["deployment"] == name.strip()
