"""The one error type of kvcalc, and the exit codes it maps to (stdlib only)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_GATE_FAILED = 1  # a capacity gate or a probe check disagreed
EXIT_USAGE = 2  # bad flag, bad config, bad file: the input is wrong
EXIT_CANNOT_RUN = 3  # the probe cannot run here (no torch, no CUDA, no memory)


_MARK = "\x1f"  # brackets a setting's name inside a message (a control character no input keeps)
FLAG = "flag"  # name a setting as the command line spells it: --kv-dtype
KEY = "key"  # name a setting as a gate file spells it: kv_dtype


_NAMED = _MARK + "([a-z][a-z0-9_]{0,63})" + _MARK  # a marked name; any other use of the character stays as it is


def named(name: str) -> str:
    """A setting inside an error message, kept as data: shown as ``--kv-dtype`` on the command
    line and as ``kv_dtype`` in a gate file (``KvcalcError.text``). ``name`` is the setting's
    name (``kvcalc.app.settings``), whose primary flag is ``--`` + name with ``_`` -> ``-``."""
    return f"{_MARK}{name}{_MARK}"


class KvcalcError(Exception):
    """A problem the user can fix. The message is one line naming the flag or field."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def settings(self) -> tuple[str, ...]:
        """The settings the message names, in order."""
        import re

        return tuple(re.findall(_NAMED, str(self.args[0]))) if self.args else ()

    def text(self, style: str = FLAG) -> str:
        """The message with each setting named in ``style`` (FLAG or KEY)."""
        import re

        msg = str(self.args[0]) if self.args else ""
        if _MARK not in msg:
            return msg
        return re.sub(_NAMED, lambda m: "--" + m.group(1).replace("_", "-") if style == FLAG else m.group(1), msg)

    def __str__(self) -> str:
        return self.text(FLAG)

    @property
    def message(self) -> str:
        return " ".join(str(self).split("\n"))


class ConfigError(KvcalcError):
    """A model config lacks a field or holds an impossible value."""


class PlanError(KvcalcError):
    """A parallel plan or flag value the model or engine cannot take."""
