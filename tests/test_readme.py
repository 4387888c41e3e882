"""The README's command outputs and help excerpts are generated from the real CLI (cog blocks);
this fails when they are stale: regenerate with `cog -r README.md`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_readme_outputs_are_current():
    pytest.importorskip("cogapp")
    p = subprocess.run([sys.executable, "-m", "cogapp", "--check", "README.md"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_readme_quick_start_commands():
    text = (ROOT / "README.md").read_text()
    assert "python3 -m venv" in text and "pipx install" in text
    assert "pip install . && kvcalc size qwen3-0.6b --tokens 4096" in text
    assert "pip install -e '.[test]' && python3 -m pytest -m " + '"not slow"' in text


def test_docs_agree_on_startup_figures():
    import re

    readme = (ROOT / "README.md").read_text()
    hardening = (ROOT / "docs" / "hardening.md").read_text()
    ratios = re.findall(r"\*\*(\d\.\d\d)x\*\*", readme)
    assert ratios and all(f"{r}x" in hardening for r in ratios[:2])


def test_gate_ci_snippet_installs_from_the_repository():
    text = (ROOT / "docs" / "gate.md").read_text()
    assert "pip install kvcalc\n" not in text and "git+https://" in text
