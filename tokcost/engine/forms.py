"""Linear forms over a pass's features: how each kernel's work is counted once per configuration.

A kernel's FLOPs and bytes are linear in the features of the pass it runs in (tokens, KV tokens read, query-key
pairs, token-expert pairs, ...); every nonlinear piece (per-replica ceilings, windows, expert coverage) lives in
the features, computed exactly per point (features.py). A Form is c + sum_i a_i x_i over the feature vector x.
The stage builders of stages.py, written once, run on Forms to give a configuration's coefficients and on floats
to give one point's numbers. A product of two features raises: a builder cannot hide a nonlinearity.
"""

from __future__ import annotations

from collections.abc import Sequence

Terms = tuple[tuple[int, float], ...]  # (feature index, coefficient), indices increasing, coefficients nonzero


def _merge(a: Terms, b: Terms, sign: float) -> Terms:
    out = dict(a)
    for i, x in b:
        out[i] = out.get(i, 0.0) + sign * x
    return tuple((i, x) for i, x in sorted(out.items()) if x != 0.0)


class Form:
    """c + sum of a_i x_i: a linear function of the feature vector x."""

    __slots__ = ("const", "terms")

    def __init__(self, const: float = 0.0, terms: Terms = ()) -> None:
        self.const = float(const)
        self.terms = terms

    @staticmethod
    def feature(index: int) -> Form:
        """The form x_index."""
        return Form(0.0, ((index, 1.0),))

    @staticmethod
    def of(value: Form | float) -> Form:
        """A form (a number becomes a constant form)."""
        return value if isinstance(value, Form) else Form(value)

    def __call__(self, x: Sequence[float]) -> float:
        """The value at feature vector x."""
        value = self.const
        for i, a in self.terms:
            value += a * x[i]
        return value

    def fold(self, x: Sequence[float], indices: frozenset[int]) -> Form:
        """The form with the features in `indices` fixed at their values in x (folded into the constant)."""
        const = self.const
        for i, a in self.terms:
            if i in indices:
                const += a * x[i]
        return Form(const, tuple((i, a) for i, a in self.terms if i not in indices))

    def __add__(self, other: Form | float) -> Form:
        if isinstance(other, Form):
            return Form(self.const + other.const, _merge(self.terms, other.terms, 1.0))
        return Form(self.const + other, self.terms)

    def __radd__(self, other: float) -> Form:
        return Form(other + self.const, self.terms)

    def __sub__(self, other: Form | float) -> Form:
        if isinstance(other, Form):
            return Form(self.const - other.const, _merge(self.terms, other.terms, -1.0))
        return Form(self.const - other, self.terms)

    def __rsub__(self, other: float) -> Form:
        return Form(other - self.const, tuple((i, -a) for i, a in self.terms))

    def __mul__(self, other: Form | float) -> Form:
        if isinstance(other, Form):
            if self.terms and other.terms:
                raise TypeError("a product of two features is not linear: compute it as a feature (features.py)")
            return self * other.const if not other.terms else other * self.const
        return Form(self.const * other, tuple((i, a * other) for i, a in self.terms if a * other != 0.0))

    def __rmul__(self, other: float) -> Form:
        return Form(other * self.const, tuple((i, other * a) for i, a in self.terms if other * a != 0.0))

    def __truediv__(self, other: float) -> Form:
        return Form(self.const / other, tuple((i, a / other) for i, a in self.terms))

    def __neg__(self) -> Form:
        return Form(-self.const, tuple((i, -a) for i, a in self.terms))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (int, float)):
            return not self.terms and self.const == other
        return isinstance(other, Form) and (self.const, self.terms) == (other.const, other.terms)

    def __hash__(self) -> int:
        return hash((self.const, self.terms))

    def __format__(self, spec: str) -> str:
        """Symbolic: a compiled stage's note names its features (x3) instead of a number."""
        parts = [format(self.const, spec)] if self.const or not self.terms else []
        parts += [f"{format(a, spec)} x{i}" for i, a in self.terms]
        return " + ".join(parts)

    def __repr__(self) -> str:
        return f"Form({self.const!r}, {self.terms!r})"
