"""Fitting the engine profiles (never the hardware) on published rows: a robust, regularized, gated fit.

The model: each row's prediction is the engine's own (cases.py) under its cell's parameter values (space.py);
its error is e = log(predicted time / measured time) (rates inverted). The fit minimizes, over the free
parameters' log-values z and one offset u per source and level (an engine era on CUDA, an engine on ROCm):
- sum over rows of Student-t's -log density of (e - u_source), NU degrees of freedom, scale SCALE (robust: a
  row far off pulls far less than under squares);
- u^2 / (2 TAU^2) per offset: each publication may sit a little off as a whole (an unstated GPU variant, clocks,
  a harness) without moving shared parameters; used only while fitting (a prediction has no offset);
- |log value - log parent| / scale per free parameter (Laplace shrinkage: era -> engine -> all engines; decode
  attention's engine value and a cost towards its prior centre), smoothed at 0 by EPS;
- (distance outside its range / HINGE_SCALE)^2 / 2 per parameter, and per GPU an era ran on for the GEMV and GEMM
  shares of the datasheet (priors.py): the soft walls that keep every value physical.
Search: Levenberg-Marquardt on the Gauss-Newton (IRLS) model, the rows' Jacobian by forward differences through
the engine. Deterministic: the same rows give the same values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tokcost.validation.cases import Case, Pricer
from tokcost.validation.cells import Cell
from tokcost.validation.priors import HINGE_SCALE, PRODUCT_HINGE_SCALE
from tokcost.validation.space import LOOSE_SPREAD, Space

NU = 4.0  # Student-t degrees of freedom
SCALE = 0.15  # Student-t scale on log error
TAU = 0.2  # a source's offset: its spread in log (an unstated variant or clock: +-20%)
ZERO_SUM = 0.01  # a level's offsets sum to zero within this (in log): they carry no era's or platform's level
EPS = 0.02  # smoothing of |x| at 0
STEP = 0.01  # forward-difference step in log
MAX_ITERATIONS = 80
TOLERANCE = 1e-7
TRACE = False


@dataclass(frozen=True, slots=True)
class FitResult:
    """What a fit found: every parameter's value, which were free, the source offsets, its objective."""

    values: dict[str, float]  # every parameter (free, or its parent's / prior centre's value)
    free: tuple[str, ...]
    informed: dict[str, int]  # rows each parameter informs
    offsets: dict[str, float]  # per source and level ("source|engine@era@platform", era * off CUDA), fitting only
    objective: float
    iterations: int


def _rho(e: float) -> float:
    return (NU + 1) / 2 * math.log1p(e * e / (NU * SCALE * SCALE))


def _smooth_abs(d: float) -> float:
    return math.sqrt(d * d + EPS * EPS)


def _level(cell: Cell) -> str:
    """The values that carry a cell's level: on CUDA its era's own (each era fits its efficiencies; summed over
    the engine's eras, one era's sources could all sit off one way and another era's the other, and the era's
    values would not move); on another platform the engine's gap there, which its eras share."""
    era = cell.era if cell.platform == "cuda" else "*"
    return f"{cell.engine}@{era}@{cell.platform}"


class Objective:
    """The fit's objective over free log-values `z` and source offsets `u`; its Gauss-Newton model."""

    def __init__(self, cases: Sequence[Case], space: Space, pricer: Pricer) -> None:
        self.cases, self.space, self.pricer = list(cases), space, pricer
        # one offset per source and level: a publication's unstated variant or harness, per engine era it ran on
        # CUDA and per engine on another platform (its ROCm runs are another build of the engine: AMD's images, a
        # fork, its own Dockerfile)
        keys = [f"{c.row.source_id}|{_level(c.cell)}" for c in cases]
        self.sources = sorted(set(keys))
        self.source_of = [self.sources.index(k) for k in keys]
        # the offsets of each level sum to zero, so that its values, not the offsets, carry it
        levels = sorted({k.split("|")[1] for k in self.sources})
        self.groups = [[i for i, k in enumerate(self.sources) if k.endswith(f"|{v}")] for v in levels]
        self.products = space.products(cases)

    def errors(self, values: dict[str, float], only: Sequence[int] | None = None) -> dict[int, float]:
        """Each case's e = log(predicted / measured time) under the values."""
        out = {}
        for i in range(len(self.cases)) if only is None else only:
            case = self.cases[i]
            out[i] = case.time_error(self.pricer.predict(case, self.space.case_values(i, case, values)))
        return out

    def penalties(self, z: dict[str, float], var: dict[str, str | None], values: dict[str, float]) -> list[tuple]:
        """Each prior term as (kind, x, coefficients {variable: +-1}, scale, range): x linear in z."""
        terms: list[tuple] = []
        for name in self.space.free:
            p = self.space.params[name]
            if p.parent is None:
                terms.append(("laplace", z[name] - math.log(p.prior.centre), {name: 1.0}, p.scale, None))
            else:
                parent_var = var[p.parent]
                x = z[name] - math.log(values[p.parent])
                coef = {name: 1.0} if parent_var is None else {name: 1.0, parent_var: -1.0}
                terms.append(("laplace", x, coef, p.scale, None))
            terms.append(("hinge", z[name], {name: 1.0}, HINGE_SCALE, (math.log(p.prior.low), math.log(p.prior.high))))
        for name, share, (low, high) in self.products:
            v = var.get(name)
            if v is not None:
                span = (math.log(low), math.log(high))
                terms.append(("hinge", z[v] + math.log(share), {v: 1.0}, PRODUCT_HINGE_SCALE, span))
        return terms

    def value(self, e: dict[int, float], u: list[float], terms: list[tuple]) -> float:
        """The objective: rows, offsets, priors."""
        total = sum(_rho(e[i] - u[self.source_of[i]]) for i in e)
        total += sum(x * x for x in u) / (2 * TAU * TAU)
        total += sum(sum(u[k] for k in g) ** 2 for g in self.groups) / (2 * ZERO_SUM * ZERO_SUM)
        for kind, x, _, scale, span in terms:
            if kind == "laplace":
                total += _smooth_abs(x) / scale
            else:
                h = max(0.0, span[0] - x, x - span[1])
                total += (h / scale) ** 2 / 2
        return total


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """x with a x = b (Gaussian elimination with partial pivoting; a is small and positive definite)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for k in range(n):
        pivot = max(range(k, n), key=lambda r: abs(m[r][k]))
        m[k], m[pivot] = m[pivot], m[k]
        if abs(m[k][k]) < 1e-300:
            continue
        for r in range(k + 1, n):
            f = m[r][k] / m[k][k]
            if f:
                row_r, row_k = m[r], m[k]
                for c in range(k, n + 1):
                    row_r[c] -= f * row_k[c]
    x = [0.0] * n
    for k in range(n - 1, -1, -1):
        if abs(m[k][k]) < 1e-300:
            continue
        x[k] = (m[k][n] - sum(m[k][c] * x[c] for c in range(k + 1, n))) / m[k][k]
    return x


class _Model:
    """The Gauss-Newton (IRLS) model of the objective at one point: gradient g and curvature H over the variables."""

    def __init__(self, n: int) -> None:
        self.g = [0.0] * n
        self.h = [[0.0] * n for _ in range(n)]

    def add(self, coef: dict[int, float], slope: float, weight: float) -> None:
        """A term whose value moves by `slope` per unit of sum(coef x) and curves by `weight` along it."""
        for a, ca in coef.items():
            self.g[a] += slope * ca
            row = self.h[a]
            for b, cb in coef.items():
                row[b] += weight * ca * cb


def _assemble(obj: Objective, names: list[str], values: dict[str, float], var: dict[str, str | None],
              e: dict[int, float], u: list[float], terms: list[tuple],
              without: str | None = None) -> _Model:  # fmt: skip
    """The Gauss-Newton model at one point over the free log-values `names` then the source offsets: the rows'
    Jacobian by forward differences through the engine (each free variable moves only the rows that read it), the
    offsets' terms, the priors' (all but `without`'s own)."""
    index = {n: i for i, n in enumerate(names)}
    affected: dict[str, list[int]] = {n: [] for n in names}
    for i, case_names in enumerate(obj.space.case_names):
        for v in {var[n] for n in case_names} - {None}:
            affected[v].append(i)  # type: ignore[index]
    model = _Model(len(names) + len(obj.sources))
    jac: dict[int, dict[int, float]] = {i: {} for i in range(len(obj.cases))}
    for v in names:
        moved = {k: (x * math.exp(STEP) if var[k] == v else x) for k, x in values.items()}
        for i, ei in obj.errors(moved, affected[v]).items():
            jac[i][index[v]] = (ei - e[i]) / STEP
    for i, row in jac.items():
        s = len(names) + obj.source_of[i]
        r = e[i] - u[obj.source_of[i]]
        denom = NU * SCALE * SCALE + r * r
        model.add({**row, s: -1.0}, (NU + 1) * r / denom, (NU + 1) / denom)
    for k, uk in enumerate(u):
        model.add({len(names) + k: 1.0}, uk / TAU**2, 1 / TAU**2)
    for group in obj.groups:
        model.add({len(names) + k: 1.0 for k in group}, sum(u[k] for k in group) / ZERO_SUM**2, 1 / ZERO_SUM**2)
    for kind, x, coef, scale, span in terms:
        if kind == "laplace" and next(iter(coef)) == without:
            continue  # the parameter's own pull towards its parent or prior centre
        c = {index[name]: sign for name, sign in coef.items()}
        if kind == "laplace":
            root = _smooth_abs(x)
            model.add(c, x / (scale * root), 1 / (scale * root))
        elif x < span[0] or x > span[1]:
            edge = span[0] if x < span[0] else span[1]
            model.add(c, (x - edge) / scale**2, 1 / scale**2)
    return model


def spreads(cases: Sequence[Case], space: Space, result: FitResult, pricer: Pricer | None = None) -> dict[str, float]:
    """Each free parameter's spread at the fit (the standard deviation of its log-value in the Laplace
    approximation: the inverse of the objective's curvature) with its own prior pull left out, so that what pins it
    is the rows, the other parameters' terms (its hierarchy: an engine's value through its eras') and the physical
    walls; a direction the rows leave flat, alone or traded against another parameter, spreads wide."""
    pricer = pricer or Pricer()
    obj = Objective(cases, space, pricer)
    names = list(result.free)
    z = {n: math.log(result.values[n]) for n in names}
    values, var = space.resolve(z)
    u = [result.offsets[k] for k in obj.sources]
    e = obj.errors(values)
    terms = obj.penalties(z, var, values)
    out = {}
    for k, name in enumerate(names):
        h = _assemble(obj, names, values, var, e, u, terms, without=name).h
        unit = [1.0 if j == k else 0.0 for j in range(len(h))]
        column = _solve([row[:] for row in h], unit)  # column k of the inverse curvature
        out[name] = math.sqrt(column[k]) if column[k] > 0 else math.inf
    return out


def fit(cases: Sequence[Case], *, space: Space | None = None, pricer: Pricer | None = None) -> FitResult:
    """Fit the free parameters on `cases` (gated on them unless `space` is given gated), from their priors' centres."""
    pricer = pricer or Pricer()
    if space is None:
        space = Space(cases)
        space.gate(cases, pricer)
    obj = Objective(cases, space, pricer)
    names = list(space.free)
    index = {n: i for i, n in enumerate(names)}
    z = {n: math.log(space.params[n].prior.centre) for n in names}
    u = [0.0] * len(obj.sources)
    values, var = space.resolve(z)
    e = obj.errors(values)
    terms = obj.penalties(z, var, values)
    current = obj.value(e, u, terms)
    damping, iterations = 1e-3, 0
    for iterations in range(1, MAX_ITERATIONS + 1):  # noqa: B007 - the count is reported
        model = _assemble(obj, names, values, var, e, u, terms)
        improved = False
        while damping < 1e10:
            a = [[hij + (damping * model.h[i][i] + 1e-9 if i == j else 0.0) for j, hij in enumerate(hrow)]
                 for i, hrow in enumerate(model.h)]  # fmt: skip
            step = _solve(a, [-gi for gi in model.g])
            biggest = max((abs(s) for s in step), default=0.0)
            if biggest > 1.0:  # at most a factor e per parameter per step
                step = [s / biggest for s in step]
            z_new = {n: z[n] + step[index[n]] for n in names}
            u_new = [uk + step[len(names) + k] for k, uk in enumerate(u)]
            values_new, _ = space.resolve(z_new)
            e_new = obj.errors(values_new)
            terms_new = obj.penalties(z_new, var, values_new)
            trial = obj.value(e_new, u_new, terms_new)
            if trial < current:
                improved = current - trial > TOLERANCE * (1 + abs(current))
                z, u, values, e, terms, current = z_new, u_new, values_new, e_new, terms_new, trial
                damping = max(damping / 3, 1e-9)
                break
            damping *= 4
        if TRACE:
            print(f"it {iterations} F {current:.3f} damping {damping:.2g} improved {improved}")
        if not improved:
            break
    return FitResult(
        values=values,
        free=tuple(names),
        informed={n: len(rows) for n, rows in space.informed.items()},
        offsets=dict(zip(obj.sources, u, strict=True)),
        objective=current,
        iterations=iterations,
    )


def fit_identified(cases: Sequence[Case], space: Space, pricer: Pricer | None = None, rounds: int = 3) -> FitResult:
    """Fit, then take out every free value the rows leave flat (its spread past LOOSE_SPREAD: space.py) and fit
    again from the priors, until none is left or `rounds` refits are spent; `space.loose` names them."""
    pricer = pricer or Pricer()
    result = fit(cases, space=space, pricer=pricer)
    for _ in range(rounds):
        loose = [n for n, s in spreads(cases, space, result, pricer).items() if s > LOOSE_SPREAD]
        if not loose:
            break
        space.demote(loose)
        result = fit(cases, space=space, pricer=pricer)
    return result
