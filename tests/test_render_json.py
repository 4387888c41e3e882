"""render.to_json: the same document json.dumps gives, laid out for reading (top-level items
one a line, a 200-row sweep one row a line), for any JSON value."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from kvcalc.render import to_json

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=40,
)


@given(JSON)
def test_round_trip(value):
    assert json.loads(to_json(value)) == json.loads(json.dumps(value))


def test_layout():
    rows = [{"tp": tp, "bytes_per_token": 114688 // tp, "notes": ["x" * 30, "y" * 30]} for tp in (1, 2, 4, 8)]
    text = to_json({"model": "qwen3-0.6b", "rows": rows})
    lines = text.splitlines()
    assert lines[0] == "{" and lines[1] == '  "model": "qwen3-0.6b",' and lines[-1] == "}"
    # each row on its own line, four spaces in
    row_lines = [ln for ln in lines if ln.startswith('    {"tp": ')]
    assert len(row_lines) == 4
    assert text.endswith("}\n")
