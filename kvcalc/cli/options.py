"""Options shared by every command. The settings' options come from the one table of
settings (``kvcalc.app.settings``): named as vLLM names them so values paste between the two
(``--tensor-parallel-size``/``-tp``, ``--kv-cache-dtype``, ...)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import typing
from collections.abc import Callable, Iterable, Iterator
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperCommand, TyperOption

from kvcalc.app.settings import BOOL, MODEL, OUTPUT, PANELS, TABLE, SettingField, Settings
from kvcalc.errors import KvcalcError

Model = Annotated[str, typer.Argument(help="Preset name (kvcalc presets), path to config.json or its folder, or Hub repo id")]
Format = Annotated[str, typer.Option("--format", "-f", help="table | json | markdown", rich_help_panel=OUTPUT)]
Units = Annotated[str, typer.Option("--units", help="iec (KiB/MiB/GiB, default) | si (KB/MB/GB)", rich_help_panel=OUTPUT)]
Revision = Annotated[
    Optional[str], typer.Option("--revision", help="Hub revision (branch, tag or commit) of a Hub repo id", rich_help_panel=MODEL)
]

# the default of a command's ``settings`` (and ``sweeps``) parameter: ``command`` fills it in
FROM_FLAGS: Any = None


@functools.cache
def _click_type(python_type: type) -> Any:
    """The click type typer gives an option of this Python type (INT, FLOAT, STRING)."""
    from typer.main import get_click_type
    from typer.models import OptionInfo

    return get_click_type(annotation=python_type, parameter_info=OptionInfo())


def _option(f: SettingField, *, as_list: bool, unset: bool = False) -> TyperOption:
    """One setting of the table as the option typer would build from a parameter
    ``name: type = typer.Option(default, *flags, help=..., rich_help_panel=...)``, built
    directly: typer's per-parameter signature analysis cost ~0.1 ms an option at every start,
    and ``size`` has over 50 (as a comma list when ``as_list``)."""
    python_type: type = f.python_type
    if as_list:
        python_type, help_text, default = str, f"{f.help} (one value or a comma list: a sweep)", None
    elif unset and f.kind != BOOL:
        help_text, default = f.help, None
    else:
        help_text, default = f.help, f.default
    switch = f.kind == BOOL and not as_list  # a switch: --continuation (no --no-continuation)
    flags = (f.flag,) if switch else f.flags
    if switch and f.default is None:  # on, off or the engine's default: --enable-prefix-caching/--no-enable-prefix-caching
        flags = (f"{f.flag}/--no-{f.flag[2:]}",)
    return TyperOption(
        param_decls=[f.name, *flags],
        type=None if switch else _click_type(python_type),
        is_flag=True if switch else None,
        default=default,
        show_default=True,  # typer.Option's default
        help=help_text,
        rich_help_panel=f.panel,
    )


def command(
    app: typer.Typer, name: str, *, settings: Iterable[str], sweep: bool = False, unset: Iterable[str] = ()
) -> Callable:
    """Register ``fn`` as ``kvcalc NAME`` with the given settings as options.

    ``fn`` declares a parameter ``settings``; it receives a ``Settings`` built from the
    flags. With ``sweep``, the table's sweepable settings take comma lists and ``fn`` also
    receives ``sweeps``: setting name -> the raw list text (None when not given). The
    ``unset`` settings show no default: when one is not given, ``Settings`` takes the
    table's; a ``given`` parameter of ``fn`` receives the names given on the command line
    (``probe`` reads the others from a log)."""
    unset = frozenset(unset)
    # in the order of the help panels: model, traffic, parallelism, engine, budget, output
    names = tuple(sorted(settings, key=lambda n: PANELS.index(TABLE[n].panel) if n in TABLE else 0))
    unknown = [n for n in names if n not in TABLE]
    if unknown:
        raise ValueError(f"unknown settings {unknown}")  # a programming error

    def register(fn: Callable) -> Callable:
        own = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
        params: list[inspect.Parameter] = []
        at = 0  # where the settings' options go among the command's parameters
        for p in own.parameters.values():
            if p.name == "settings":
                at = len(params)
            elif p.name not in ("sweeps", "given"):
                params.append(p.replace(annotation=hints.get(p.name, p.annotation)))
        swept = tuple(n for n in names if sweep and TABLE[n].sweep)

        class Command(TyperCommand):
            """The command typer builds from ``fn``'s own parameters, plus the settings' options."""

            def __init__(self, *, params: list[Any], **kw: Any) -> None:
                settings_options = [_option(TABLE[n], as_list=n in swept, unset=n in unset) for n in names]
                super().__init__(params=[*params[:at], *settings_options, *params[at:]], **kw)

        @functools.wraps(fn)
        def run(**kw: Any) -> Any:
            values = {n: kw.pop(n) for n in names}
            if sweep:
                kw["sweeps"] = {n: values.pop(n) for n in swept}
            if "given" in own.parameters:
                kw["given"] = frozenset(
                    n for n, v in values.items() if v is not None and not (v is False and TABLE[n].default is False)
                )
            kw["settings"] = Settings(**{n: v for n, v in values.items() if not (n in unset and v is None)})
            return fn(**kw)

        del run.__wrapped__  # typer must read the signature below, not fn's
        run.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        app.command(name, cls=Command)(run)
        return fn

    return register


def check_format(fmt: str) -> str:
    f = fmt.strip().lower()
    if f in ("md",):
        f = "markdown"
    if f not in ("table", "json", "markdown"):
        raise KvcalcError(f"--format {fmt!r} is not known; valid: table, json, markdown")
    return f


def check_units(units: str) -> str:
    u = units.strip().lower()
    if u not in ("iec", "si"):
        raise KvcalcError(f"--units {units!r} is not known; valid: iec, si")
    return u


def _stderr_tty() -> bool:
    try:
        return bool(sys.stderr.isatty())
    except (ValueError, AttributeError):
        return False


@contextlib.contextmanager
def status(message: str, delay: float = 1.0) -> Iterator[None]:
    """A Rich status line on stderr while the block runs, shown only when stderr is a terminal
    and only once the block has taken ``delay`` seconds (rich is imported then, not before)."""
    if not _stderr_tty():
        yield
        return
    import threading

    lock = threading.Lock()
    state: dict[str, Any] = {}

    def start() -> None:
        with lock:
            if state.get("done"):
                return
            from rich.console import Console

            shown = Console(file=sys.stderr, force_terminal=True).status(message)
            shown.start()
            state["shown"] = shown

    timer = threading.Timer(delay, start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            if "shown" in state:
                state["shown"].stop()


def resolve(model: str, revision: str | None = None) -> Any:
    """The MODEL argument resolved (kvcalc.sources.resolve), with a status line when it takes
    over a second (a Hub fetch)."""
    from kvcalc.sources.resolve import resolve as resolve_model

    with status(f"reading {model} (Hugging Face Hub)"):
        return resolve_model(model, revision=revision)


def bounded(value: int | None, flag: str, limit: int) -> int | None:
    """``value`` unless it is beyond ``limit`` (a KvcalcError naming the flag): a command's own
    integer options are bounded as the settings are (``kvcalc.app.settings.LIMITS``)."""
    if value is not None and value > limit:
        text = str(value)
        shown = text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"
        raise KvcalcError(f"{flag} {shown} is beyond what kvcalc sizes (limit {limit:,})")
    return value


def emit(text: str) -> None:
    """Print a command's output. A character stdout cannot encode (a path's undecodable bytes)
    is shown as its escape; a full disk or closed stdout is one line, exit 2."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    try:
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:
            sys.stdout.write(text.encode(encoding, errors="backslashreplace").decode(encoding))
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise KvcalcError(f"cannot write to standard output: {exc.strerror or exc}") from None
