"""DensityFlow distillation: query-budgeted alignment of the surrogate with a black box
(:class:`DistillationMixin` of :class:`~recourselab.densityflow.DensityFlow`).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from recourselab.densityflow.config import class_labels, is_int
from recourselab.densityflow.ode import integrate
from recourselab.densityflow.training import frozen
from recourselab.errors import (
    DataError,
)
from recourselab.progress import bar
from recourselab.rng import torch_generator

log = logging.getLogger(__name__)


DISTILL_BUDGET = "distill"


class DistillationMixin:
    """:meth:`distill` of :class:`~recourselab.densityflow.DensityFlow`."""

    def distill(self, oracle: Any, X: np.ndarray, y: np.ndarray, *, budget: int = 500,
                budget_name: str = DISTILL_BUDGET, progress: bool | None = None) -> int:
        """Align the surrogate with a black-box ``oracle`` using at most ``budget`` queried rows.

        Support points are the flow's end states for training queries; their labels are the
        oracle's mean probability of y*. Loss on the surrogate: squared error of its y*
        probability (both proxies; with ``distill_replay`` over every support point queried so
        far) + the NCE loss on real rows and box noise (as in ``fit``, so the surrogate forgets
        neither the classes nor the noise class); after each epoch's ``distill_inner`` surrogate steps,
        ``distill_gen_steps`` generator steps with the distilled surrogate. Stops when the
        budget (or the oracle's own limit on ``budget_name``) is spent, after the generator
        steps of the last (partial) epoch. Returns the number of rows this call queried;
        ``queries_used_`` adds them up over every ``distill`` call of this model (and is saved).

        A call that fails (a member error, bad oracle output) or is interrupted restores the
        networks' weights from before the call; the rows it queried stay counted in
        ``queries_used_``, as the oracle spent them. ``progress``: a bar over the distillation
        epochs, as in :meth:`fit`.

        Raises
        ------
        DataError
            The oracle's answer is not (rows, n_classes) probabilities in [0, 1].
        QueryBudgetExceeded
            The oracle's budget ``budget_name`` was spent before this call.
        """
        self._require_fit()
        if not all(callable(getattr(oracle, m, None)) for m in ("query", "remaining", "used")):
            raise TypeError(f"distill needs a query-counting oracle (recourselab.models.BlackBox), got "
                            f"{type(oracle).__name__}")
        if not is_int(budget) or budget < 0:
            raise DataError(f"distill budget must be an integer >= 0 (queried rows), got {budget!r}")
        budget = int(budget)  # a numpy integer would make the count unsaveable as JSON
        if budget > 0 and oracle.remaining(budget_name) == 0:
            from recourselab.models.oracle import QueryBudgetExceeded

            raise QueryBudgetExceeded(f"the oracle's query budget {budget_name!r} is already spent "
                                      f"({oracle.used(budget_name)} rows used): nothing left to distill with")
        cfg = self.config
        X = self._encode(X, "distill rows")
        if len(X) == 0:
            raise DataError("distill: no rows (the flow's end states for training rows are the support points)")
        y = class_labels(y, len(X), "distill labels", self.n_classes)
        Xt, yt = self._tensor(X), torch.tensor(y, device=self.device)
        gen = torch_generator("densityflow.distill", cfg.seed)
        opt_phi = torch.optim.AdamW(self.surrogate.parameters(), lr=cfg.distill_lr_phi,
                                    weight_decay=cfg.weight_decay)
        opt_g = torch.optim.AdamW(self.field.parameters(), lr=cfg.distill_lr_g, weight_decay=cfg.weight_decay)
        weights = [copy.deepcopy(m.state_dict()) for m in (self.surrogate, self.field)]
        before = self.queries_used_
        self.surrogate.train()
        self.field.train()
        try:
            with bar(range(cfg.distill_epochs), desc=f"distill seed {cfg.seed}", unit="epoch",
                     enabled=progress) as epochs:
                self._distill_loop(oracle, Xt, yt, gen, opt_phi, opt_g, budget, budget_name, epochs)
        except BaseException:
            for module, state in zip((self.surrogate, self.field), weights, strict=True):
                module.load_state_dict(state)
            log.error("distillation failed after %d queried rows; the networks are restored to their weights "
                      "before distill()", self.queries_used_ - before)
            raise
        finally:
            self.surrogate.eval()
            self.field.eval()
        return self.queries_used_ - before

    def _distill_loop(self, oracle: Any, Xt: torch.Tensor, yt: torch.Tensor, gen: torch.Generator,
                      opt_phi: torch.optim.Optimizer, opt_g: torch.optim.Optimizer, budget: int,
                      budget_name: str, epochs: Iterable[int]) -> None:
        """The distillation epochs (``epochs``: their indices, possibly behind a progress bar); adds each
        query's rows to ``queries_used_`` as it is answered."""
        from recourselab.models.oracle import QueryBudgetExceeded

        cfg = self.config
        used = 0
        support: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for _ in epochs:
            queried, spent = 0, False
            for _ in range(cfg.distill_inner):
                left = budget - used
                oracle_left = oracle.remaining(budget_name)
                if oracle_left is not None:
                    left = min(left, oracle_left)
                n = min(cfg.distill_points, left)
                if n <= 0:
                    spent = True
                    break
                idx = torch.randint(0, len(yt), (n,), generator=gen).to(self.device)
                target = self._flip(yt[idx], gen)
                with torch.no_grad():
                    z, _, _ = integrate(self.field, Xt[idx], target, **cfg.train_solver())
                    z = z.clamp(-self.C, self.C)
                charged = oracle.used(budget_name)
                try:
                    out = oracle.query(z.cpu().numpy().astype(float), budget=budget_name)
                except QueryBudgetExceeded:  # spent between remaining() and query(), e.g. by another caller
                    spent = True
                    break
                except BaseException:  # the oracle charges rows before its members answer: count them
                    self.queries_used_ += min(n, max(oracle.used(budget_name) - charged, 0))
                    raise
                used += n
                queried += n
                self.queries_used_ += n
                y_bar = torch.as_tensor(self._oracle_proba(out, n)[np.arange(n), target.cpu().numpy()],
                                        dtype=torch.float32, device=self.device)
                if cfg.distill_replay:
                    support.append((z, target, y_bar))
                    z, target, y_bar = (torch.cat(parts) for parts in zip(*support, strict=True))
                real = torch.randint(0, len(yt), (cfg.batch_size,), generator=gen).to(self.device)
                fit_loss = ((self.surrogate.target_proba(z, target) - y_bar) ** 2).mean(dim=1).sum()
                # The anchor is the full NCE loss, noise included: CE on real rows alone lets the
                # noise class fade (moons: box points called noise 0.79 -> 0.49) and S drift upwards.
                anchor = self.surrogate.nce_loss(Xt[real], yt[real], self._box_noise(len(real), Xt.shape[1], gen),
                                                 cfg.lambda_noise)
                opt_phi.zero_grad()
                (fit_loss + anchor).backward()
                opt_phi.step()
            if not queried:
                break
            with frozen(self.surrogate):
                for _ in range(cfg.distill_gen_steps):
                    real = torch.randint(0, len(yt), (cfg.batch_size,), generator=gen).to(self.device)
                    loss, _ = self.generator_loss(Xt[real], self._flip(yt[real], gen), y=yt[real])
                    opt_g.zero_grad()
                    loss.backward()
                    opt_g.step()
            if spent:
                break
        if used < cfg.distill_epochs * cfg.distill_inner * cfg.distill_points:
            log.info("distillation stopped: query budget spent (%d rows used)", used)

    def _oracle_proba(self, out: Any, n: int) -> np.ndarray:
        """The oracle's mean class probabilities (n, K) of one query, checked."""
        proba = np.asarray(getattr(out, "mean_proba", None), dtype=float)
        if proba.shape != (n, self.n_classes):
            raise DataError(f"the oracle answered probabilities of shape {proba.shape} for {n} rows; the model has "
                            f"{self.n_classes} classes, so ({n}, {self.n_classes}) was expected")
        if not (np.isfinite(proba).all() and (proba >= 0).all() and (proba <= 1).all()):
            raise DataError("the oracle answered probabilities that are NaN, infinite or outside [0, 1]")
        return proba
