"""The pure core: frozen records (kvcalc.core.record) and integer formulas. No I/O, no printing."""
