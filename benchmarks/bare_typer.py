"""The floor any typer CLI pays: a one-command typer app that prints a number."""

import typer

app = typer.Typer()


@app.command()
def main(n: int = 114688) -> None:
    print(n)


if __name__ == "__main__":
    app()
