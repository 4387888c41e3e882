"""The pure core: frozen dataclasses and integer formulas. No I/O, no printing."""
