"""Words for people, shared by every floor (stdlib only): plurals that read right."""

from __future__ import annotations

_IRREGULAR = {"replica": "replicas", "GPU": "GPUs", "request": "requests", "problem": "problems", "row": "rows"}


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 GPU``, ``2 GPUs``, ``1 request``, ``0 requests``."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {many or _IRREGULAR.get(word) or word + 's'}"
