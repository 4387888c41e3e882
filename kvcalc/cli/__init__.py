"""The command line. Thin: parse flags -> resolve -> compute -> render -> print.

Commands live one per module and are registered lazily: ``kvcalc size ...`` imports only
``kvcalc.cli.size``. Errors map to exit codes in one place (``KvcalcGroup.main``).
"""

from __future__ import annotations

import os
import re
import signal
import sys
from typing import Any


class Signalled(BaseException):
    """SIGINT or SIGTERM while a command runs: unwinds (temporary files are removed), then
    one line and exit 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.exit_code = 128 + signum


_GC_PAUSED = False  # the kvcalc command pauses the cyclic garbage collector while it starts
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
    # The command's start-up: typer and kvcalc's modules create ~100,000 long-lived objects and
    # no garbage cycles, yet the cyclic collector would scan them again and again (~15 ms of a
    # ~160 ms start). It is paused until main() has built the command, then the objects built
    # so far are frozen (never scanned) and collection resumes for the command itself.
    import gc

    gc.disable()
    _GC_PAUSED = True

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


# the examples each command's --help ends with (real commands; tests/test_newcomer.py runs them)
EXAMPLES: dict[str, tuple[str, ...]] = {
    "size": ("kvcalc size qwen3-0.6b --tokens 4096", "kvcalc size llama-3.1-70b --tp 4 --gpu H100-80GB --max-model-len 32768",
             "kvcalc size qwen3-32b --tp 2 --gpu H100 --enforce-eager --max-num-seqs 128"),
    "ranks": ("kvcalc ranks qwen3-0.6b --tp 4 --pp 2", "kvcalc ranks llama-3.1-70b --tp 8 --dp 2 --format json"),
    "presets": ("kvcalc presets", "kvcalc presets show qwen3-0.6b", "kvcalc presets import Qwen/Qwen3-8B"),
    "fit": ("kvcalc fit llama-3.1-70b --gpu H100-80GB --max-model-len 32768 --concurrency 32",
            "kvcalc fit qwen3-32b --gpu A100-80GB --max-model-len 16384 --concurrency 8 --format json"),
    "gpus": ("kvcalc gpus", "kvcalc gpus --units si"),
    "lifecycle": ("kvcalc lifecycle qwen3-0.6b --beams 4 --prompt 1000 --gen 100",
                  "kvcalc lifecycle qwen3-0.6b --spec-tokens 4 --prompt 1000 --gen 100 --kv-cache-memory 8GiB"),
    "report": ("kvcalc report qwen3-0.6b --gpu H100-80GB -o report.html",
               "kvcalc report qwen3-8b llama-3.1-8b --gpu H100-80GB --format markdown -o review.md"),
    "compare": ("kvcalc compare qwen3-0.6b --attention mha,gqa,mqa", "kvcalc compare qwen3-0.6b --tp 1,2,4 --kv-dtype bfloat16,fp8",
                "kvcalc compare qwen3-8b llama-3.1-8b --gpu H100-80GB"),
    "recompute": ("kvcalc recompute --prompt 4 --gen 5", "kvcalc recompute qwen3-0.6b --prompt 2048 --gen 128"),
    "gate": ("kvcalc gate --init > capacity.yaml", "kvcalc gate capacity.yaml", "kvcalc gate capacity.yaml --format json --junit gate.xml"),
    "probe": ("kvcalc probe qwen3-0.6b --device cpu", "kvcalc probe qwen3-0.6b --from-vllm-log serve.log"),
}


def epilog(name: str) -> str | None:
    """'Examples:' and one command per paragraph (rich help keeps paragraphs apart)."""
    ex = EXAMPLES.get(name)
    return "Examples:\n\n" + "\n\n".join(f"  {e}" for e in ex) if ex else None


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("kvcalc")
        except PackageNotFoundError:  # a checkout on sys.path, not installed
            v = "unknown"
        sys.stdout.write(f"kvcalc {v}\n")
        raise typer.Exit(0)


LONG_QUOTE = 200  # a quoted value past this many characters (longer than a path) is shown by its start and length


def _shorten(m: re.Match) -> str:
    q, text = m.group(1), m.group(2)
    return f"{q}{text[:60]}...{q} ({len(text):,} characters)"


def _err(message: str) -> None:
    from kvcalc.render import clean  # no control character reaches a terminal or a CI log

    # an echoed value the user gave (a pasted file, a runaway variable) stays short: the line names the flag
    message = re.sub(rf"(?<!\w)(['\"])([^'\"\n]{{{LONG_QUOTE + 1},}})\1(?!\w)", _shorten, message)
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
        add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",  # help panels; rich is imported only when help or a usage error is shown
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit"),
    ) -> None:
        """KV cache calculator for LLM serving, byte for byte as vLLM sizes it."""

    modules: list[str] = []
    for name in names if names is not None else list(COMMANDS):
        mod = COMMANDS[name]
        if mod not in modules:
            modules.append(mod)
    for mod in modules:
        importlib.import_module(mod).register(app)
    infos: list[Any] = [*app.registered_commands, *app.registered_groups]
    for info in infos:
        if info.name and not info.epilog:  # typer keeps an unset epilog as a falsy placeholder
            info.epilog = epilog(info.name)
    return app


def main(argv: list[str] | None = None) -> None:
    install_signal_handlers()
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    names = [first] if first in COMMANDS else None
    app = build_app(names)
    _resume_gc()
    app(args=argv, prog_name="kvcalc")


def _resume_gc() -> None:
    """Start-up is over: what it built stays (frozen, never scanned again); the command's own
    objects are collected as usual, so a long sweep keeps its memory bounded."""
    global _GC_PAUSED
    if _GC_PAUSED:
        import gc

        gc.freeze()
        gc.enable()
        _GC_PAUSED = False
