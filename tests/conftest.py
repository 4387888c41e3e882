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


@pytest.fixture(autouse=True)
def _fresh_local_gpu():
    """--gpu auto reads the local GPU once per process; each test starts without that answer (tests fake it)."""
    from kvcalc.sources import localgpu

    localgpu.detect.cache_clear()
    yield
    localgpu.detect.cache_clear()


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


# The long runs, left out of the fast default suite (`pytest -m "not slow"`, under a minute);
# `.ci/run` runs everything. Property tests (hypothesis), fuzzing, and the Hub tests that start
# a fake Hub server and kvcalc in subprocesses.
SLOW_MODULES = {"test_properties.py"}
SLOW_TESTS = {
    "test_fast_equals_footprint_on_random_models",
    "test_fast_equals_footprint_with_mamba_and_cross",
    "test_generated_configs_give_a_result_or_one_line",
    "test_random_and_corrupted_bytes_through_the_cli",
    "test_generated_config_files_through_the_cli",
    "test_mutated_gate_files",
    "test_arbitrary_json_values_give_a_result_or_one_line",
    "test_presets_import_then_size_offline",
    "test_repo_without_config",
    "test_preset_run_does_not_import_huggingface_hub",
    "test_timeout",
    "test_unknown_model_type",
    "test_mistral_params_json",
    "test_offline_not_cached",
    "test_malformed_json",
    "test_online_then_offline_from_cache",
    "test_gated_without_token",
    "test_repo_not_found",
    "test_multimodal_text_config",
    "test_network_unreachable",
    "test_pool_uses_the_checkpoint_bytes",
}


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.name in SLOW_MODULES or getattr(item, "originalname", item.name) in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
