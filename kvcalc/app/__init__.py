"""The use cases: settings -> evaluation, compare, fit, gate evaluation, report data."""
