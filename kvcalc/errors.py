"""The one error type of kvcalc, and the exit codes it maps to (stdlib only)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_GATE_FAILED = 1  # a capacity gate or a probe check disagreed
EXIT_USAGE = 2  # bad flag, bad config, bad file: the input is wrong
EXIT_CANNOT_RUN = 3  # the probe cannot run here (no torch, no CUDA, no memory)


class KvcalcError(Exception):
    """A problem the user can fix. The message is one line naming the flag or field."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return " ".join(str(self).split("\n"))


class ConfigError(KvcalcError):
    """A model config lacks a field or holds an impossible value."""


class PlanError(KvcalcError):
    """A parallel plan or flag value the model or engine cannot take."""
