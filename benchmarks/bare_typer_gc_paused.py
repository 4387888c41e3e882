"""The bare one-command typer app (bare_typer.py) with the same start-up as kvcalc's: the cyclic
garbage collector paused while typer loads, then the loaded objects frozen. The floor kvcalc's
own modules and options are measured against, with the collector's cost taken out of both."""

import gc

gc.disable()

import typer  # noqa: E402

app = typer.Typer()


@app.command()
def main(n: int = 114688) -> None:
    print(n)


if __name__ == "__main__":
    gc.freeze()
    gc.enable()
    app()
