"""Wachter-style gradient counterfactuals on one differentiable member (the tuned MLP).

Typical use::

    method = Wachter(box, schema=schema, threshold=0.7)      # the box's "mlp" member, as torch
    cf = method.explain(X_query, target=1)                   # cf.queries == 0 (white-box search)
    cf = cf.verify(box)                                      # the ensemble's verdict, counted apart

Per factual ``x`` the search minimises, over the mutable encoded columns of ``x'``,

    lambda * relu(m - (z_t(x') - max_{k != t} z_k(x')))  +  dist(x, x')

where ``z`` are the member's logits, ``t`` the target and ``m = logit(threshold)`` the margin at
which the member's probability of ``t`` reaches ``threshold`` (binary: exactly; K > 2: at least).
``dist`` is L1 (default, as Wachter et al. with standardised features) or squared L2. Adam runs
at most ``steps`` steps per round, each followed by a projection onto the training range
(numerical columns; a factual outside it widens its own box) and [-1, 1] (phase pairs). Every
20 steps (and at a round's end) the iterate is made valid (categorical levels, integers,
training range, immutables copied), and a valid point whose member probability of ``t`` is at
least ``threshold`` is kept when it is the closest so far. The search ends at a check where
every row already had such a point and none got closer by 1e-3. Rows without one at a round's
end get ``lambda`` multiplied by ``lambda_growth`` for the next round (``rounds`` rounds at most).
A row that never passes keeps its last valid iterate (``valid`` False).

The search uses the member's weights only: ``queries`` is 0 and ``budget`` has nothing to
limit. ``valid`` is the *member's* verdict at ``threshold``; the ensemble's verdict comes from
:meth:`Counterfactuals.verify` (its own budget). Deterministic: no randomness.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
import pandas as pd

from recourselab.data.schema import Schema
from recourselab.errors import DataError, UnknownKeyError
from recourselab.methods.base import Counterfactuals
from recourselab.methods.common import (
    check_budget,
    encode_factuals_and_targets,
    positive,
    resolve_schema,
    result,
    valid_points,
)
from recourselab.models.oracle import BlackBox

logger = logging.getLogger(__name__)

#: The member that the gradient search differentiates by default.
DEFAULT_MEMBER = "mlp"
_ACTIVATIONS = ("relu", "tanh", "logistic", "identity")
#: Adam steps between two checks of the (made valid) iterate; the search stops once every row passed.
CHECK_EVERY = 20


def torch_mlp(model: Any) -> Any:
    """A :class:`~recourselab.discover.dce.TorchClassifier`-like object for a fitted MLP.

    Parameters
    ----------
    model : a scikit-learn ``MLPClassifier``, a zoo ``FittedModel`` of kind ``"mlp"`` (its
        estimator is one), or an object that already has ``logits_tensor`` or ``proba_tensor``.

    Returns
    -------
    :class:`TorchMLP`, or ``model`` itself when it is already differentiable.

    Raises
    ------
    DataError
        ``model`` is not a fitted MLP (no ``coefs_``), or uses an unknown activation.
    """
    if hasattr(model, "logits_tensor") or hasattr(model, "proba_tensor"):
        return model
    est = getattr(model, "estimator", model)
    if not hasattr(est, "coefs_") or not hasattr(est, "intercepts_"):
        raise DataError(f"Wachter needs a differentiable model: a fitted scikit-learn MLPClassifier, a zoo 'mlp' "
                        f"model or an object with proba_tensor; got {type(model).__name__}")
    if est.activation not in _ACTIVATIONS:
        raise DataError(f"MLP activation {est.activation!r} is not one of {_ACTIVATIONS}")
    return TorchMLP(est.coefs_, est.intercepts_, est.activation, est.out_activation_)


class TorchMLP:
    """The forward pass of a fitted scikit-learn MLP in torch (float64), with class logits.

    Parameters
    ----------
    coefs, intercepts : the estimator's layer weights (in, out) and biases (out,).
    activation : hidden activation (``relu``, ``tanh``, ``logistic``, ``identity``).
    out_activation : ``logistic`` (binary: one output unit z, class logits (0, z)) or ``softmax``.
    """

    def __init__(self, coefs: list[np.ndarray], intercepts: list[np.ndarray], activation: str,
                 out_activation: str) -> None:
        import torch

        self.weights = [torch.as_tensor(np.asarray(w, dtype=np.float64)) for w in coefs]
        self.biases = [torch.as_tensor(np.asarray(b, dtype=np.float64)) for b in intercepts]
        self.activation = activation
        self.binary = out_activation == "logistic"

    def logits_tensor(self, X: Any) -> Any:
        """Class logits (n, K) of a float64 tensor (n, d), differentiable."""
        import torch

        act = {"relu": torch.relu, "tanh": torch.tanh, "logistic": torch.sigmoid, "identity": lambda h: h}
        h = X
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ w + b
            if i < len(self.weights) - 1:
                h = act[self.activation](h)
        return torch.cat([torch.zeros_like(h), h], dim=1) if self.binary else h

    def proba_tensor(self, X: Any) -> Any:
        """Class probabilities (n, K), differentiable."""
        import torch

        return torch.softmax(self.logits_tensor(X), dim=1)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities (n, K) of encoded rows, float64."""
        import torch

        with torch.no_grad():
            return self.proba_tensor(torch.as_tensor(np.asarray(X, dtype=np.float64))).numpy()


def _logits(model: Any, X: Any) -> Any:
    import torch

    if hasattr(model, "logits_tensor"):
        return model.logits_tensor(X)
    return torch.log(model.proba_tensor(X).clamp_min(1e-12))


class Wachter:
    """Gradient counterfactuals on one differentiable member at a probability threshold (module docstring).

    Parameters
    ----------
    oracle : the ensemble; its member ``member`` is the model unless ``model`` is given. It is
        never queried during the search.
    schema : the dataset schema (default: the oracle's).
    model : the differentiable model (see :func:`torch_mlp`); default: the oracle's ``member``.
    member : the oracle member used when ``model`` is None. Default ``"mlp"``.
    threshold : the member's probability of the target to reach, in (0, 1). Default 0.5.
    distance : ``"l1"`` (default) or ``"l2"`` (squared).
    lam : the first validity weight lambda. Default 1.0.
    lambda_growth : lambda's factor per round for rows that have not passed. Default 10.
    rounds : at most this many rounds. Default 5.
    steps : Adam steps per round. Default 200.
    lr : Adam's learning rate. Default 0.05.
    margin : extra logit margin beyond ``logit(threshold)`` during the search (the check is at
        ``threshold`` itself). Default 0.1.
    """

    name = "wachter"

    def __init__(self, oracle: BlackBox, *, schema: Schema | None = None, model: Any = None,
                 member: str = DEFAULT_MEMBER, threshold: float = 0.5, distance: str = "l1", lam: float = 1.0,
                 lambda_growth: float = 10.0, rounds: int = 5, steps: int = 200, lr: float = 0.05,
                 margin: float = 0.1) -> None:
        self.schema = resolve_schema(oracle, schema, self.name)
        self.oracle = oracle
        if model is None:
            model = oracle.model(member)
        self.model = torch_mlp(model)
        self.threshold = positive(threshold, "threshold", self.name, upper=1.0)
        if self.threshold >= 1.0:
            raise DataError(f"{self.name}: threshold must lie in (0, 1), got {threshold!r}")
        if distance not in ("l1", "l2"):
            raise UnknownKeyError(f"{self.name}: unknown distance {distance!r}; valid: l1, l2")
        self.distance = distance
        self.lam = positive(lam, "lam", self.name)
        self.lambda_growth = positive(lambda_growth, "lambda_growth", self.name)
        self.rounds = positive(rounds, "rounds", self.name, integer=True)
        self.steps = positive(steps, "steps", self.name, integer=True)
        self.lr = positive(lr, "lr", self.name)
        if not isinstance(margin, int | float) or isinstance(margin, bool) or not math.isfinite(margin) or margin < 0:
            raise DataError(f"{self.name}: margin must be a finite number >= 0, got {margin!r}")
        self.margin = float(margin)

    def member_proba(self, X: np.ndarray) -> np.ndarray:
        """The member's class probabilities (n, K) of encoded rows (white-box; no oracle query)."""
        import torch

        with torch.no_grad():
            return torch.softmax(_logits(self.model, torch.as_tensor(X, dtype=torch.float64)), dim=1).numpy()

    def explain(self, factuals: np.ndarray | pd.DataFrame, target: Any = None, *,
                budget: int | None = None) -> Counterfactuals:
        """Gradient counterfactuals of every factual.

        Parameters and errors are those of :meth:`recourselab.methods.base.CounterfactualMethod.explain`.
        ``budget`` is accepted for the interface: the search sends no oracle row (``queries`` 0).

        Returns
        -------
        Counterfactuals
            ``valid`` (n,): the member gives the target at least ``threshold``.
        """
        import torch

        t0 = time.perf_counter()
        check_budget(budget, self.name)
        Xf, tgt = encode_factuals_and_targets(factuals, target, self.schema, self.name)
        n = len(Xf)
        mutable = torch.as_tensor(~self.schema.immutable_mask())
        need = math.log(self.threshold / (1 - self.threshold)) + self.margin
        x0 = torch.as_tensor(Xf, dtype=torch.float64)
        t_idx = torch.as_tensor(tgt)
        lam = torch.full((n,), self.lam, dtype=torch.float64)
        best, best_cost = Xf.copy(), np.full(n, np.inf)
        last = Xf.copy()
        done = np.zeros(n, dtype=bool)
        x = x0.clone()
        lo, hi = self.schema.encoded_bounds()  # the training range (numerical), [-1, 1] (phase pairs)
        box_lo = torch.as_tensor(np.minimum(lo, Xf), dtype=torch.float64)  # a factual outside it stays feasible
        box_hi = torch.as_tensor(np.maximum(hi, Xf), dtype=torch.float64)
        is_target = torch.nn.functional.one_hot(t_idx, self.schema.n_classes).bool()
        rounds_run = 0
        for _ in range(self.rounds):
            rounds_run += 1
            x = x.detach().requires_grad_(True)
            opt = torch.optim.Adam([x], lr=self.lr)
            for step in range(1, self.steps + 1):
                xm = torch.where(mutable, x, x0)
                z = _logits(self.model, xm)
                gap = z.gather(1, t_idx[:, None])[:, 0] - z.masked_fill(is_target, -torch.inf).max(dim=1).values
                diff = xm - x0
                dist = diff.abs().sum(1) if self.distance == "l1" else (diff ** 2).sum(1)
                loss = (lam * torch.relu(need - gap) + dist).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                with torch.no_grad():  # stay in the box the valid points are snapped into
                    x.copy_(torch.minimum(torch.maximum(x, box_lo), box_hi))
                if step % CHECK_EVERY and step < self.steps:
                    continue
                last = valid_points(torch.where(mutable, x, x0).detach().numpy(), Xf, self.schema)
                ok = self.member_proba(last)[np.arange(n), tgt] >= self.threshold
                cost = np.linalg.norm(last - Xf, axis=1)
                better = ok & (cost < best_cost)
                settled = done.all() and not (ok & (cost < best_cost - 1e-3)).any()  # every row passed before
                best[better], best_cost[better] = last[better], cost[better]
                done |= ok
                if settled:
                    break
            if done.all():
                break
            lam = torch.where(torch.as_tensor(done), lam, lam * self.lambda_growth)
        cf = np.where(done[:, None], best, last)
        if (~done).any():
            logger.info("%s: %d of %d factuals do not reach p >= %.2f on the member", self.name,
                        int((~done).sum()), n, self.threshold)
        log = {"threshold": self.threshold, "rounds_run": rounds_run, "not_reached": int((~done).sum()),
               "member_proba": self.member_proba(cf)[np.arange(n), tgt].tolist()}
        return result(self.name, self.schema, factuals, Xf, cf, tgt, 0, time.perf_counter() - t0, done, log)


__all__ = ["DEFAULT_MEMBER", "TorchMLP", "Wachter", "torch_mlp"]
