"""Proposal strategies (registry :data:`STRATEGIES`): how candidates are generated.

Every strategy receives the editable rows of the current iterate, the guidance field on
them and an evaluator that scores candidates with the certified objective Q(.; eta) (one
model call per batch), and returns its best candidate. The solver then compares it with
the no-op candidate (the current X) and keeps the arg-min, ties going to the no-op.

- ``monte_carlo``: M independent cone-sampled proposals, one evaluation batch.
- ``genetic``: a population of M proposals evolved for ``generations`` generations with
  tournament selection, uniform crossover over the editable rows (a row is a gene, so a
  child never edits more than ``h`` features per row), cone-guided mutation of a row's
  edited features, and elitism; one evaluation batch per generation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from recourselab.errors import UnknownKeyError

if TYPE_CHECKING:  # annotation only: proposals -> settings -> strategies would close a cycle
    from recourselab.discover.proposals import ProposalSpace


class UnknownStrategyError(UnknownKeyError):
    """A strategy name that the registry does not hold."""


@dataclass(frozen=True)
class Evaluation:
    """Objective values of a batch of C candidates (squared units).

    Attributes
    ----------
    Q, Qx, Qy : ndarrays (C,): Q(.; eta) and its input/output parts (exact, re-sorted).
    y : ndarray (C, k): model scores of the edited rows.
    dq : ndarray (C, k): change of each edited row's score q_i under the current (fixed)
        plans and eta; rows are additive under fixed plans (Prop. 3.1).
    exact : bool (C,): Q was computed exactly (re-sorted); only exact candidates are selected.
    """

    Q: np.ndarray
    Qx: np.ndarray
    Qy: np.ndarray
    y: np.ndarray
    dq: np.ndarray
    exact: np.ndarray


Evaluator = Callable[[np.ndarray], Evaluation]
Rescorer = Callable[[np.ndarray, np.ndarray], Evaluation]


@dataclass(frozen=True)
class SearchContext:
    """What a strategy may use in one outer iteration.

    Attributes
    ----------
    base : current values of the editable rows (k, d).
    base_y : their current model scores (k,).
    rows : their row indices (k,).
    guidance : gradient of SW^2 on those rows (k, d).
    space : the proposal primitive.
    evaluate : scores candidates (C, k, d) -> :class:`Evaluation` (one model call).
    rescore : scores candidates whose model scores (C, k) are already known (no model call).
    trials : M, candidates per batch.
    recombine : add the row-wise recombination candidate (see :func:`recombine`).
    level_scores : guidance on each mutable categorical's levels (k, L) when the objective is
        measured through an ``embed`` (see :meth:`ProposalSpace.pull_back`); None otherwise.
    """

    base: np.ndarray
    base_y: np.ndarray
    rows: np.ndarray
    guidance: np.ndarray
    space: ProposalSpace
    evaluate: Evaluator
    rescore: Rescorer
    trials: int
    recombine: bool = True
    level_scores: tuple[np.ndarray, ...] | None = None


@dataclass(frozen=True)
class Selection:
    """The best candidate a strategy found (to be compared with the no-op)."""

    candidate: np.ndarray
    y: np.ndarray
    Q: float
    Qx: float
    Qy: float
    n_evaluated: int


class Strategy(Protocol):
    name: str

    def search(self, ctx: SearchContext, rng: np.random.Generator) -> Selection: ...


def _best(cands: np.ndarray, ev: Evaluation) -> tuple[int, Selection]:
    i = int(np.argmin(np.where(ev.exact, ev.Q, np.inf)))
    return i, Selection(candidate=cands[i], y=ev.y[i], Q=float(ev.Q[i]), Qx=float(ev.Qx[i]),
                        Qy=float(ev.Qy[i]), n_evaluated=len(ev.Q))


def recombine(ctx: SearchContext, cands: np.ndarray, ev: Evaluation, best: Selection) -> Selection:
    """Row-wise recombination: each row takes its best evaluated edit, if that edit lowers its q_i.

    Under fixed plans Q is a sum of row scores, so the rows of different candidates can be
    combined; rows whose every edit raises q_i keep their current values. The combination
    reuses known model scores (no query) and is scored with the exact (re-sorted) Q; it
    replaces ``best`` only if its exact Q is lower.
    """
    j = np.argmin(ev.dq, axis=0)  # (k,)
    k = cands.shape[1]
    gain = ev.dq[j, np.arange(k)] < 0
    if not gain.any():
        return best
    combo = np.where(gain[:, None], cands[j, np.arange(k)], ctx.base)[None]
    y_combo = np.where(gain, ev.y[j, np.arange(k)], ctx.base_y)[None]
    ev_c = ctx.rescore(combo, y_combo)
    if ev_c.Q[0] < best.Q:
        return Selection(candidate=combo[0], y=y_combo[0], Q=float(ev_c.Q[0]), Qx=float(ev_c.Qx[0]),
                         Qy=float(ev_c.Qy[0]), n_evaluated=best.n_evaluated + 1)
    return best


class MonteCarlo:
    """M independent OT-guided cone proposals (plus their row-wise recombination); arg-min of Q."""

    name = "monte_carlo"

    def __init__(self, settings: object | None = None) -> None:
        self.settings = settings

    def search(self, ctx: SearchContext, rng: np.random.Generator) -> Selection:
        cands = ctx.space.propose(ctx.base, ctx.rows, ctx.guidance, ctx.trials, rng, ctx.level_scores)
        ev = ctx.evaluate(cands)
        _, best = _best(cands, ev)
        return recombine(ctx, cands, ev, best) if ctx.recombine else best


def _tournament(Q: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Binary tournament: ``size`` winners (indices), the lower Q of two random entrants."""
    a, b = rng.integers(0, len(Q), size), rng.integers(0, len(Q), size)
    return np.where(Q[a] <= Q[b], a, b)


class Genetic:
    """Genetic search over candidate edits of the editable rows (see module docstring)."""

    name = "genetic"

    def __init__(self, settings: object) -> None:
        self.generations = settings.generations
        self.crossover_prob = settings.crossover_prob
        self.gene_swap_prob = settings.gene_swap_prob
        self.mutation_prob = settings.mutation_prob
        self.elite = settings.elite

    def search(self, ctx: SearchContext, rng: np.random.Generator) -> Selection:
        space, M = ctx.space, ctx.trials
        k = ctx.base.shape[0]
        pop = space.propose(ctx.base, ctx.rows, ctx.guidance, M, rng, ctx.level_scores)
        ev = ctx.evaluate(pop)
        Q, y, dq = ev.Q.copy(), ev.y.copy(), ev.dq.copy()
        _, best = _best(pop, ev)
        total = len(Q)
        n_elite = min(self.elite, M)
        for _ in range(1, self.generations):
            n_child = M - n_elite
            if n_child <= 0:
                break
            elite = np.argsort(Q, kind="stable")[:n_elite]
            pa, pb = _tournament(Q, n_child, rng), _tournament(Q, n_child, rng)
            cross = rng.random(n_child) < self.crossover_prob
            swap = (rng.random((n_child, k)) < self.gene_swap_prob) & cross[:, None]
            children = np.where(swap[..., None], pop[pb], pop[pa])
            mutate = rng.random((n_child, k)) < self.mutation_prob
            edited = space.edited(children, ctx.base)
            fresh = space.choose((n_child, k), rng)
            which = np.where(edited.any(axis=-1, keepdims=True), edited, fresh) & mutate[..., None]
            children = space.perturb(children, ctx.rows, ctx.guidance, which, rng, ctx.level_scores)
            ev = ctx.evaluate(children)
            total += len(ev.Q)
            _, sel = _best(children, ev)
            if sel.Q < best.Q:
                best = sel
            pop = np.concatenate([pop[elite], children])
            Q = np.concatenate([Q[elite], ev.Q])
            y = np.concatenate([y[elite], ev.y])
            dq = np.concatenate([dq[elite], ev.dq])
        best = dataclasses.replace(best, n_evaluated=total)
        if ctx.recombine:
            last = Evaluation(Q=Q, Qx=Q, Qy=Q, y=y, dq=dq, exact=np.ones(len(Q), dtype=bool))
            best = recombine(ctx, pop, last, best)
        return best


STRATEGIES: dict[str, type] = {"monte_carlo": MonteCarlo, "genetic": Genetic}


def get_strategy(name: str) -> type:
    """The strategy class called ``name``; unknown names list the valid ones."""
    try:
        return STRATEGIES[name]
    except (KeyError, TypeError):
        raise UnknownStrategyError(
            f"unknown strategy {name!r}; valid strategies: {', '.join(STRATEGIES)}") from None


def make_strategy(name: str, settings: object) -> Strategy:
    """Instantiate strategy ``name`` with the solver settings."""
    return get_strategy(name)(settings)


__all__ = [
    "STRATEGIES", "Evaluation", "Evaluator", "Genetic", "MonteCarlo", "SearchContext", "Selection",
    "Strategy", "UnknownStrategyError", "get_strategy", "make_strategy",
]
