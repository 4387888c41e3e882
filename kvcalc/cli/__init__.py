"""The command line. Thin: parse flags -> resolve -> compute -> render -> print.

Commands live one per module and are registered lazily: ``kvcalc size ...`` imports only
``kvcalc.cli.size``. Errors map to exit codes in one place (``KvcalcGroup.main``).
"""

from __future__ import annotations

import os
import signal
import sys


class Signalled(BaseException):
    """SIGINT or SIGTERM while a command runs: unwinds (temporary files are removed), then
    one line and exit 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.exit_code = 128 + signum


_RUNNING = False  # set once the command runs inside KvcalcGroup.main's handlers


def _on_signal(signum: int, frame: object) -> None:
    if not _RUNNING:  # start-up (imports): nothing written yet, leave at once
        os.write(2, b"kvcalc: error: interrupted\n")
        os._exit(128 + signum)
    raise Signalled(signum)


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM become one line and exit 128 + the signal (where nobody else set one)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _on_signal)


if os.path.basename(sys.argv[0] if sys.argv else "") in ("kvcalc", "__main__.py"):
    install_signal_handlers()  # the kvcalc command (not a library import), before typer loads

import importlib  # noqa: E402 - after the signal handlers: an interrupt while importing is one line

import typer  # noqa: E402
from typer.core import TyperGroup  # noqa: E402

from kvcalc.errors import EXIT_USAGE, KvcalcError  # noqa: E402

# command name -> module that defines register(app)
COMMANDS: dict[str, str] = {
    "size": "kvcalc.cli.size",
    "ranks": "kvcalc.cli.ranks",
    "presets": "kvcalc.cli.presets",
    "fit": "kvcalc.cli.fit",
    "gpus": "kvcalc.cli.gpus",
    "lifecycle": "kvcalc.cli.lifecycle",
    "report": "kvcalc.cli.report",
    "compare": "kvcalc.cli.compare",
    "recompute": "kvcalc.cli.recompute",
    "gate": "kvcalc.cli.gate",
    "probe": "kvcalc.cli.probe",
}


def _err(message: str) -> None:
    from kvcalc.render import clean  # no control character reaches a terminal or a CI log

    try:
        sys.stderr.write(f"kvcalc: error: {clean(message)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class KvcalcGroup(TyperGroup):
    """Maps every failure to one line on stderr and an exit code; never a traceback."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # type: ignore[override]
        global _RUNNING
        _RUNNING = True
        try:
            rv = super().main(
                args=args, prog_name=prog_name or "kvcalc", complete_var=complete_var, standalone_mode=False, **extra
            )
        except Signalled as exc:
            _err("interrupted")
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            _err("interrupted")
            sys.exit(130)
        except KvcalcError as exc:
            _err(exc.message)
            sys.exit(exc.exit_code)
        except typer.Abort:
            _err("aborted")
            sys.exit(130)
        except BrokenPipeError:
            sys.exit(0)
        except OSError as exc:  # standard output or a file kvcalc writes: a full disk, a read-only folder
            where = f" {exc.filename!r}" if getattr(exc, "filename", None) else ""
            _err(f"cannot write{where}: {exc.strerror or exc}")
            sys.exit(EXIT_USAGE)
        except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `kvcalc`: show the help
                sys.stdout.write(str(exc.format_message()) + "\n")
                sys.exit(0)
            if _is_click_error(exc):  # usage errors of the click typer ships (vendored or not)
                _err(" ".join(str(exc.format_message()).split()))
                sys.exit(int(getattr(exc, "exit_code", EXIT_USAGE) or EXIT_USAGE))
            if os.environ.get("KVCALC_DEBUG"):
                raise
            _err(f"internal error: {type(exc).__name__}: {exc} (set KVCALC_DEBUG=1 for the traceback and report it)")
            sys.exit(70)
        sys.exit(rv if isinstance(rv, int) else 0)


def _is_click_error(exc: Exception) -> bool:
    """Click's exceptions (typer vendors click from 0.28 on) carry format_message and exit_code."""
    return callable(getattr(exc, "format_message", None)) and isinstance(getattr(exc, "exit_code", None), int)


def build_app(names: list[str] | None = None) -> typer.Typer:
    app = typer.Typer(
        cls=KvcalcGroup,
        name="kvcalc",
        help="KV cache calculator for LLM serving: bytes per token, per rank, the pool vLLM reserves, capacity gates.",
        add_completion=False,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def _root() -> None:
        """KV cache calculator for LLM serving, byte for byte as vLLM sizes it."""

    modules: list[str] = []
    for name in names if names is not None else list(COMMANDS):
        mod = COMMANDS[name]
        if mod not in modules:
            modules.append(mod)
    for mod in modules:
        importlib.import_module(mod).register(app)
    return app


def main(argv: list[str] | None = None) -> None:
    install_signal_handlers()
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    names = [first] if first in COMMANDS else None
    app = build_app(names)
    app(args=argv, prog_name="kvcalc")
