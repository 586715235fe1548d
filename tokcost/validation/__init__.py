"""Validation against published measurements: the data, the comparison, and the fit of "expected"."""
