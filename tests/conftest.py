from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli import build_app


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    """Tables render for COLUMNS (test_terminal.py checks 80); the layout tests read 120-wide
    tables, and colour is never on under pytest."""
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.fixture(scope="session")
def app():
    return build_app()


@pytest.fixture()
def run(app):
    """Invoke kvcalc; returns (exit_code, stdout, stderr)."""
    runner = CliRunner()

    def _run(*args: str):
        result = runner.invoke(app, list(args))
        return result.exit_code, result.stdout, result.stderr

    return _run


@pytest.fixture()
def run_json(run):
    def _run(*args: str):
        code, out, err = run(*args, "--format", "json")
        assert code == 0, err
        return json.loads(out)

    return _run
