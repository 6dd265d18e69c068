"""DensityFlow: density-guided Neural ODE counterfactuals that stay valid across an ensemble.

Typical use::

    flow = DensityFlow(lambda_cost=0.4, lambda_den=0.1, epochs=60, schema=schema, seed=0)
    flow.fit(X_train, y_train)                  # alternating surrogate / generator training
    flow.distill(oracle, X_train, y_train, budget=500)   # align the surrogate with the black box
    result = flow.generate(X_query, target=1 - y_query)  # CounterfactualResult
    checked = result.verify(oracle)      # or generate(..., oracle=oracle): result.verdict per row
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import io
import json
import logging
import math
import numbers
import time
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from recourselab.data.schema import Schema, encode_rows
from recourselab.densityflow.flow import VelocityField, integrate
from recourselab.densityflow.surrogate import Surrogate, noise_bound, refresh_spectral_norms
from recourselab.errors import (
    ArtifactError,
    ChecksumError,
    ConfigError,
    DataError,
    MissingArtifactError,
    RecourselabError,
)
from recourselab.io import RESTORE_HINT, error_reason, json_bytes, read_json, restore_hint, write_bytes
from recourselab.methods.base import Counterfactuals
from recourselab.models.verdict import VERIFY_BUDGET, Verdict, as_oracle, require_budget, verify
from recourselab.progress import bar
from recourselab.provenance import code_fingerprint
from recourselab.runtime import torch_seeded

log = logging.getLogger(__name__)

DISTILL_BUDGET = "distill"


@dataclass(frozen=True)
class DensityFlowConfig:
    """Every setting of DensityFlow (paper values as defaults unless noted).

    Loss weights: ``lambda_valid`` (CE of the surrogate at x'), ``lambda_cost`` (kinetic
    energy e(T)), ``lambda_den`` (ReLU(log_tau - S(x'|y*)), log_tau = log(noise_ratio) when
    None). ``density_quantile`` (extension, off by default) replaces the fixed margin by that
    quantile of S(x|y) over the batch's real rows of class y, i.e. it asks counterfactuals
    to reach the core of the target class. NCE: ``noise_ratio`` r = N_noise / N_data per batch,
    ``lambda_noise``, box half-width C = max(c_floor, beta * max|x|_inf). Training:
    ``epochs`` (raised so that training takes at least ``min_steps`` optimizer steps: small
    datasets get more epochs), ``batch_size``, AdamW ``lr_g`` / ``lr_phi`` / ``weight_decay``,
    linear warm-up for ``warmup_epochs`` then cosine to
    ``lr_min``, EMA ``ema_decay`` of all networks. ODE: torchdiffeq ``method`` with
    (``rtol_train``, ``atol_train``) during training and (``rtol_test``, ``atol_test``) at
    inference; ``adjoint`` switches to the adjoint method (direct backprop is 2-3x faster on
    CPU at this size); ``field_spectral_norm`` spectral-normalises the velocity field's layers
    (extension: keeps the ODE from stiffening in long runs). Distillation: ``distill_epochs`` x ``distill_inner`` x
    ``distill_points`` queried rows, learning rates ``distill_lr_phi`` / ``distill_lr_g``;
    ``distill_replay`` fits every surrogate step on all support points queried so far (no
    extra query; False: only the newest ``distill_points``), ``distill_gen_steps`` generator
    steps per distillation epoch.
    Inference: ``n_starts`` starts per query (the query + jitters of std ``jitter``), the
    starts of at most ``solve_queries`` queries per batched ODE solve (bounds the memory of
    large query sets; queries in one solve share its adaptive steps).
    """

    lambda_valid: float = 1.0
    lambda_cost: float = 0.4
    lambda_den: float = 0.1
    log_tau: float | None = None
    density_quantile: float | None = None
    noise_ratio: float = 0.2
    lambda_noise: float = 1.0
    beta: float = 1.2
    c_floor: float = 2.0
    score_mode: str = "target"
    hidden: int = 128
    embed_dim: int = 16
    epochs: int = 800
    min_steps: int = 0
    batch_size: int = 64
    lr_g: float = 1e-3
    lr_phi: float = 1e-4
    weight_decay: float = 1e-4
    warmup_epochs: int = 20
    lr_min: float = 1e-6
    ema_decay: float = 0.999
    method: str = "dopri5"
    rtol_train: float = 1e-3
    atol_train: float = 1e-3
    rtol_test: float = 1e-4
    atol_test: float = 1e-4
    adjoint: bool = False
    field_spectral_norm: bool = False
    max_train_rows: int | None = None
    distill_epochs: int = 20
    distill_inner: int = 3
    distill_points: int = 8
    distill_lr_phi: float = 1e-4
    distill_lr_g: float = 5e-5
    distill_replay: bool = False
    distill_gen_steps: int = 1
    n_starts: int = 30
    jitter: float = 0.05
    solve_queries: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # numpy scalars -> Python numbers (torch seeds, JSON config)
            if isinstance(getattr(self, f.name), np.generic):
                object.__setattr__(self, f.name, getattr(self, f.name).item())
        problems = [f"{name}={getattr(self, name)!r} ({rule})" for name, rule, ok in _config_checks(self) if not ok]
        if problems:
            raise ConfigError(f"invalid DensityFlow settings: {'; '.join(problems)}")

    @property
    def margin(self) -> float:
        return math.log(self.noise_ratio) if self.log_tau is None else self.log_tau


def _is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool) and math.isfinite(v)


def _config_checks(c: DensityFlowConfig) -> list[tuple[str, str, bool]]:
    """(setting, rule, holds) for every range rule of :class:`DensityFlowConfig`."""
    checks = [(name, "a finite number >= 0", _is_num(getattr(c, name)) and getattr(c, name) >= 0)
              for name in ("lambda_valid", "lambda_cost", "lambda_den", "lambda_noise", "weight_decay", "lr_min",
                           "jitter")]
    checks += [(name, "a finite number > 0", _is_num(getattr(c, name)) and getattr(c, name) > 0)
               for name in ("noise_ratio", "beta", "c_floor", "lr_g", "lr_phi", "rtol_train", "atol_train",
                            "rtol_test", "atol_test", "distill_lr_phi", "distill_lr_g")]
    checks += [(name, "an integer >= 1", _is_int(getattr(c, name)) and getattr(c, name) >= 1)
               for name in ("hidden", "embed_dim", "epochs", "batch_size", "distill_points", "n_starts",
                            "solve_queries")]
    checks += [(name, "an integer >= 0", _is_int(getattr(c, name)) and getattr(c, name) >= 0)
               for name in ("min_steps", "warmup_epochs", "distill_epochs", "distill_inner", "distill_gen_steps",
                            "seed")]
    checks += [(name, "True or False", isinstance(getattr(c, name), bool))
               for name in ("adjoint", "field_spectral_norm", "distill_replay")]
    return checks + [
        ("log_tau", "None or a finite number", c.log_tau is None or _is_num(c.log_tau)),
        ("density_quantile", "None or in (0, 1)",
         c.density_quantile is None or (_is_num(c.density_quantile) and 0 < c.density_quantile < 1)),
        ("score_mode", "'target' or 'max'", c.score_mode in ("target", "max")),
        ("ema_decay", "in [0, 1)", _is_num(c.ema_decay) and 0 <= c.ema_decay < 1),
        ("lr_min", "at most lr_g and lr_phi: the cosine schedule decays to it",
         not all(_is_num(v) for v in (c.lr_min, c.lr_g, c.lr_phi)) or c.lr_min <= min(c.lr_g, c.lr_phi)),
        ("max_train_rows", "None or an integer >= 2",
         c.max_train_rows is None or (_is_int(c.max_train_rows) and c.max_train_rows >= 2)),
        ("method", f"a torchdiffeq method: {', '.join(_ode_methods())}", isinstance(c.method, str)
         and (c.method in _ode_methods() if _ode_methods() else bool(c.method))),
    ]


def _check_meta(meta: dict[str, Any], path: Path) -> None:
    """Raise an :class:`ArtifactError` naming ``path`` if a saved ``densityflow.json`` has a bad field."""
    d = meta["d"]
    checks = [
        ("config", "an object of settings", isinstance(meta["config"], dict)),
        ("d", "an integer >= 1", _is_int(d) and d >= 1),
        ("n_classes", "an integer >= 2", _is_int(meta["n_classes"]) and meta["n_classes"] >= 2),
        ("C", "a finite number > 0", _is_num(meta["C"]) and meta["C"] > 0),
        ("mutable", "a list of d booleans", isinstance(meta["mutable"], list)
         and all(isinstance(v, bool) for v in meta["mutable"]) and (not _is_int(d) or len(meta["mutable"]) == d)),
        ("queries_used", "an integer >= 0",
         _is_int(meta.get("queries_used", 0)) and meta.get("queries_used", 0) >= 0),
        ("dataset", "a dataset name or null", meta.get("dataset") is None or isinstance(meta["dataset"], str)),
        ("weights_sha256", "an object of sha256 per weights file", isinstance(meta.get("weights_sha256", {}), dict)
         and all(isinstance(v, str) for v in meta.get("weights_sha256", {}).values())),
    ]
    bad = [f"{key} ({rule}, got {meta.get(key)!r:.60})" for key, rule, ok in checks if not ok]
    if bad:
        raise ArtifactError(f"{path} is damaged: {'; '.join(bad)}; {RESTORE_HINT}")


def _ode_methods() -> tuple[str, ...]:
    """torchdiffeq's solver names (its registry is private: empty if it moves, then any name passes here)."""
    try:
        from torchdiffeq._impl.odeint import SOLVERS
    except ImportError:  # pragma: no cover - depends on torchdiffeq internals
        return ()
    return tuple(sorted(SOLVERS))


@dataclass(frozen=True)
class CounterfactualResult:
    """Counterfactuals of ``n`` queries.

    Attributes
    ----------
    factuals, counterfactuals : (n, d) encoded rows.
    counterfactuals_original : DataFrame (n, p) in original units and categories (None without schema).
    target : (n,) target classes y*.
    cost_l1, cost_l2 : (n,) distances in the encoded (standardized) space.
    density : (n,) worst-case density score S(x' | y*).
    surrogate_valid : (n,) bool, both proxies label x' as y*.
    trajectories : (n_points, n, d) ODE path of the chosen start, or None. It starts at that
        start (the factual or one of its jitters) and ends at the raw end state, before the
        clamping to the noise box, the snapping to valid points and the immutable copy that
        give ``counterfactuals``.
    verdict : the ensemble's verdict on the counterfactuals (per-model validity, agreement),
        or None when no oracle checked them (see :meth:`verify`).
    """

    factuals: np.ndarray
    counterfactuals: np.ndarray
    counterfactuals_original: pd.DataFrame | None
    target: np.ndarray
    cost_l1: np.ndarray
    cost_l2: np.ndarray
    density: np.ndarray
    surrogate_valid: np.ndarray
    trajectories: np.ndarray | None = None
    verdict: Verdict | None = None

    def verify(self, oracle: Any, *, budget_name: str = VERIFY_BUDGET) -> CounterfactualResult:
        """This result with the ensemble's verdict on its counterfactuals.

        One query of the n counterfactuals through ``oracle`` (a
        :class:`~recourselab.models.BlackBox`, a mapping of named models or one model), counted
        under its budget ``budget_name``. Rows that some member rejects are logged as a warning
        with their counts.

        Raises
        ------
        QueryBudgetExceeded
            The budget has fewer than n rows left (no member is called).
        """
        verdict = verify(oracle, self.counterfactuals, self.target, budget_name=budget_name)
        _log_rejections(verdict)
        return dataclasses.replace(self, verdict=verdict)


def _log_rejections(verdict: Verdict) -> None:
    """A warning with counts when some member rejects some of the verdict's counterfactuals."""
    c = verdict.counts()
    if c["rejected_by_any"]:
        log.warning("%d of %d counterfactuals are rejected by at least one of the %d ensemble members; %d by a "
                    "majority, %d by all (mean agreement %.2f); see the result's verdict for each row",
                    c["rejected_by_any"], c["n"], verdict.n_members, c["rejected_by_majority"],
                    c["rejected_by_all"], c["mean_agreement"])


@dataclass
class TrainLog:
    """Per-epoch means of the training losses."""

    rows: list[dict[str, float]] = field(default_factory=list)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


def class_labels(y: Any, n_rows: int, what: str, n_classes: int | None = None) -> np.ndarray:
    """``y`` as int64 class indices (n_rows,), checked: one per row, integer-valued, in 0..K-1.

    Raises
    ------
    DataError
        Naming ``what`` and the problem (shape, non-integer or non-finite values, range).
    """
    arr = np.asarray(y)
    if arr.ndim != 1 or len(arr) != n_rows:
        raise DataError(f"{what}: expected {n_rows} class indices (one per row), got shape {arr.shape}")
    numeric = arr.dtype == bool or np.issubdtype(arr.dtype, np.number) or (
        arr.dtype == object and all(isinstance(v, numbers.Real) for v in arr))  # e.g. ints held as objects
    values = arr.astype(float) if numeric else None
    if values is None or not np.isfinite(values).all() or (values % 1 != 0).any():
        raise DataError(f"{what}: class indices must be finite integers, got e.g. {arr[:3].tolist()}")
    labels = arr.astype(np.int64)
    top = n_classes - 1 if n_classes is not None else None
    if n_rows and (labels.min() < 0 or (top is not None and labels.max() > top)):
        valid = f"0..{top}" if top is not None else ">= 0"
        raise DataError(f"{what}: class indices must lie in {valid}, got {sorted(set(labels.tolist()))[:10]}")
    return labels


@contextmanager
def _frozen(module: torch.nn.Module):  # noqa: ANN202
    """Turn off ``module``'s parameter gradients inside the block, back on however it ends."""
    module.requires_grad_(False)
    try:
        yield
    finally:
        module.requires_grad_(True)


def _lr_lambda(cfg: DensityFlowConfig, base_lr: float, epochs: int):  # noqa: ANN202
    warm = min(cfg.warmup_epochs, max(epochs - 1, 0))
    floor = cfg.lr_min / base_lr

    def factor(epoch: int) -> float:
        if epoch < warm:
            return (epoch + 1) / (warm + 1)
        progress = (epoch - warm) / max(1, epochs - warm)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    return factor


class DensityFlow:
    """Density-guided Neural ODE counterfactual generator (see module docstring).

    Parameters
    ----------
    schema : the dataset schema (immutables, categorical decoding); optional for plain arrays.
    mutable : (d,) bool mask of changeable encoded columns; default: from ``schema``.
    device : torch device; default CPU.
    **settings : any field of :class:`DensityFlowConfig`.
    """

    def __init__(self, *, schema: Schema | None = None, mutable: np.ndarray | None = None,
                 device: str = "cpu", **settings: Any) -> None:
        self.config = DensityFlowConfig()
        self.with_settings(**settings)
        self.schema = schema
        self._mutable = mutable
        self.device = torch.device(device)
        self.surrogate: Surrogate | None = None
        self.field: VelocityField | None = None
        self.C: float | None = None
        self.n_classes: int | None = None
        self.log_ = TrainLog()
        self.queries_used_ = 0

    # ------------------------------------------------------------------ helpers
    def _tensor(self, X: np.ndarray) -> torch.Tensor:
        with np.errstate(over="ignore"):
            arr = np.asarray(X, dtype=np.float32)
        if not np.isfinite(arr).all():  # finite float64 values beyond float32's range become inf here
            raise DataError(f"rows hold NaN, infinite or values beyond the float32 range of the networks (|x| > "
                            f"{np.finfo(np.float32).max:.3g}): {int((~np.isfinite(arr)).any(axis=-1).sum())} row(s)")
        return torch.as_tensor(arr, device=self.device)

    def _encode(self, X: np.ndarray | pd.DataFrame, what: str) -> np.ndarray:
        width = None if self.field is None else self.field.mutable.numel()
        return encode_rows(X, self.schema, what=what, width=width)

    def _mutable_mask(self, d: int) -> np.ndarray:
        if self._mutable is not None:
            mask = np.asarray(self._mutable)
            if mask.shape != (d,) or not (mask.dtype == bool or np.isin(mask, (0, 1)).all()):
                raise DataError(f"mutable must be a boolean mask of the {d} encoded columns, got shape {mask.shape} "
                                f"and dtype {mask.dtype}")
            return mask.astype(bool)
        if self.schema is not None:
            return ~self.schema.immutable_mask()
        return np.ones(d, dtype=bool)

    def _flip(self, y: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        k = self.n_classes
        if k == 2:
            return 1 - y
        return (y + torch.randint(1, k, y.shape, generator=gen).to(y.device)) % k  # gen lives on the CPU

    def _box_noise(self, n_rows: int, d: int, gen: torch.Generator) -> torch.Tensor:
        """NCE noise for a batch of ``n_rows`` real rows: ``noise_ratio`` times as many (at least one)
        uniform points in the box [-C, C]^d. Shape (max(1, round(r * n_rows)), d)."""
        n_noise = max(1, round(self.config.noise_ratio * n_rows))
        return ((torch.rand(n_noise, d, generator=gen) * 2 - 1) * self.C).to(self.device)

    def _require_fit(self) -> None:
        if self.surrogate is None:
            raise RecourselabError("DensityFlow is not fitted: call fit() or load() first")

    # ------------------------------------------------------------------ training
    def build(self, d: int, n_classes: int, C: float) -> None:
        """Create the networks for width ``d``, ``n_classes`` classes and noise box ``C``."""
        cfg = self.config
        self.n_classes, self.C = n_classes, C
        mutable = torch.as_tensor(self._mutable_mask(d))
        with torch_seeded(cfg.seed):  # initial weights from the seed, also with tasks in threads
            self.surrogate = Surrogate(d, n_classes, hidden=cfg.hidden, score_mode=cfg.score_mode).to(self.device)
            self.field = VelocityField(d, n_classes, mutable, hidden=cfg.hidden, embed_dim=cfg.embed_dim,
                                       spectral=cfg.field_spectral_norm).to(self.device)

    def density_margin(self, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor) -> torch.Tensor | float:
        """log tau, or per-row margins from ``density_quantile`` over real rows ``x`` of labels ``y``."""
        cfg = self.config
        if cfg.density_quantile is None:
            return cfg.margin
        with torch.no_grad():
            s = self.surrogate.score(x, y)
            per_class = torch.stack([torch.quantile(s[y == c], cfg.density_quantile) if (y == c).any()
                                     else s.new_tensor(cfg.margin) for c in range(self.n_classes)])
        return per_class[target]

    def generator_loss(self, x: torch.Tensor, target: torch.Tensor, *, rtol: float, atol: float,
                       y: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Validity + cost + density loss of the flow from ``x`` (n, d) with labels ``y`` to ``target`` (n,)."""
        cfg = self.config
        z, energy, _ = integrate(self.field, x, target, rtol=rtol, atol=atol, method=cfg.method,
                                 adjoint=cfg.adjoint)
        z = z.clamp(-self.C, self.C)
        valid = self.surrogate.validity_loss(z, target)
        cost = energy.mean()
        margin = cfg.margin if y is None else self.density_margin(x, y, target)
        den = torch.relu(margin - self.surrogate.score(z, target)).mean()
        loss = cfg.lambda_valid * valid + cfg.lambda_cost * cost + cfg.lambda_den * den
        return loss, {"valid": valid.item(), "cost": cost.item(), "density": den.item()}

    def fit(self, X: np.ndarray, y: np.ndarray, *, progress: bool | None = None,
            checkpoint_dir: str | Path | None = None, checkpoint_seconds: float = 60.0) -> DensityFlow:
        """Train surrogate and generator with alternating AdamW steps (one each per batch).

        A fit that fails or is interrupted leaves the model as it was (unfitted, or its earlier fit).

        Parameters
        ----------
        X : (n, d) encoded training rows; y : (n,) class indices 0..K-1.
        progress : a progress bar over epochs: True shows it, False hides it, None shows it only
            on an interactive terminal outside CI (:func:`recourselab.progress.bar`).
        checkpoint_dir : folder for a resumable training state (networks, EMA copies, optimizers,
            schedules, random state, log), written atomically at the end of an epoch once
            ``checkpoint_seconds`` have passed since the last write. Its file name hashes the
            settings and the training data, so a later ``fit`` with the same settings and data
            (e.g. after a crash or a pre-empted GPU job) resumes from it, with exactly the result
            of an uninterrupted run, and other settings never pick it up. It is deleted when
            training completes. None: no checkpoints.
        """
        cfg = self.config
        X = encode_rows(X, self.schema, what="fit rows")  # a refit may change the width (no schema)
        schema_classes = None if self.schema is None else self.schema.n_classes
        y = class_labels(y, len(X), "fit labels", schema_classes)
        present = np.unique(y)
        if len(present) < 2:
            raise DataError("DensityFlow needs at least two classes in the training labels")
        n_classes = schema_classes if schema_classes is not None else int(y.max()) + 1
        if len(present) < n_classes:
            missing = sorted(set(range(n_classes)) - set(present.tolist()))
            raise DataError(f"fit labels have no rows of class(es) {missing} (of 0..{n_classes - 1}): the surrogate "
                            "cannot learn their density, so no flow could target them")
        if cfg.max_train_rows is not None and len(y) > cfg.max_train_rows:
            from recourselab.data.split import stratified_subsample

            keep = stratified_subsample(y, cfg.max_train_rows, cfg.seed)
            X, y = X[keep], y[keep]
        previous = (self.surrogate, self.field, self.n_classes, self.C, self.log_, self.queries_used_)
        try:
            self._train(X, y, n_classes, progress=progress, checkpoint_dir=checkpoint_dir,
                        checkpoint_seconds=checkpoint_seconds)
        except BaseException:
            # a failed or interrupted fit leaves the model as it was: unfitted, or the earlier fit
            self.surrogate, self.field, self.n_classes, self.C, self.log_, self.queries_used_ = previous
            raise
        return self

    def _train(self, X: np.ndarray, y: np.ndarray, n_classes: int, *, progress: bool | None,
               checkpoint_dir: str | Path | None, checkpoint_seconds: float) -> None:
        """The body of :meth:`fit` on checked rows ``X`` (n, d) and labels ``y`` (n,)."""
        cfg = self.config
        self.build(X.shape[1], n_classes, noise_bound(X, cfg.beta, cfg.c_floor))
        Xt, yt = self._tensor(X), torch.tensor(y, device=self.device)
        gen = torch.Generator(device="cpu").manual_seed(cfg.seed)

        opt_phi = torch.optim.AdamW(self.surrogate.parameters(), lr=cfg.lr_phi, weight_decay=cfg.weight_decay)
        opt_g = torch.optim.AdamW(self.field.parameters(), lr=cfg.lr_g, weight_decay=cfg.weight_decay)
        n_epochs = max(cfg.epochs, math.ceil(cfg.min_steps / math.ceil(len(y) / cfg.batch_size)))
        sched = [torch.optim.lr_scheduler.LambdaLR(o, _lr_lambda(cfg, o.defaults["lr"], n_epochs))
                 for o in (opt_phi, opt_g)]
        ema_fn = get_ema_multi_avg_fn(cfg.ema_decay)
        ema_s = AveragedModel(self.surrogate, multi_avg_fn=ema_fn, use_buffers=True)
        ema_f = AveragedModel(self.field, multi_avg_fn=ema_fn, use_buffers=True)

        self.log_ = TrainLog()
        self.queries_used_ = 0  # new networks: no distillation yet
        state = {"surrogate": self.surrogate, "field": self.field, "ema_surrogate": ema_s, "ema_field": ema_f,
                 "opt_phi": opt_phi, "opt_g": opt_g, "sched_phi": sched[0], "sched_g": sched[1]}
        ckpt = None if checkpoint_dir is None else Path(checkpoint_dir) / f"densityflow-{self._fit_key(X, y)}.pt"
        first = self._resume(ckpt, state, gen, n_epochs) if ckpt is not None and ckpt.exists() else 0
        last_write = started = time.monotonic()
        report_every = math.ceil(n_epochs / 10)  # at most ten progress lines per fit in the stage logs (and the last)

        # a bar closes itself when the loop ends, however it ends
        epochs = bar(range(first, n_epochs), total=n_epochs, initial=first, desc=f"DensityFlow seed {cfg.seed}",
                     unit="epoch", enabled=progress)
        for epoch in epochs:
            perm = torch.randperm(len(yt), generator=gen).to(self.device)
            sums: dict[str, float] = {"nce": 0.0, "loss": 0.0, "valid": 0.0, "cost": 0.0, "density": 0.0}
            n_batches = 0
            for start in range(0, len(perm), cfg.batch_size):
                idx = perm[start:start + cfg.batch_size]
                xb, yb = Xt[idx], yt[idx]
                nce = self.surrogate.nce_loss(xb, yb, self._box_noise(len(idx), Xt.shape[1], gen), cfg.lambda_noise)
                opt_phi.zero_grad()
                nce.backward()
                opt_phi.step()

                with _frozen(self.surrogate):
                    loss, parts = self.generator_loss(xb, self._flip(yb, gen), rtol=cfg.rtol_train,
                                                      atol=cfg.atol_train, y=yb)
                    opt_g.zero_grad()
                    loss.backward()
                    opt_g.step()
                ema_s.update_parameters(self.surrogate)
                ema_f.update_parameters(self.field)
                sums["nce"] += nce.item()
                sums["loss"] += loss.item()
                for k, v in parts.items():
                    sums[k] += v
                n_batches += 1
            for s in sched:
                s.step()
            row = {"epoch": epoch, **{k: v / n_batches for k, v in sums.items()}}
            self.log_.rows.append(row)
            if not epochs.disable:
                epochs.set_postfix(loss=f"{row['loss']:.4f}", refresh=False)
            log.debug("epoch %d: %s", epoch, row)
            if (epoch + 1) % report_every == 0 or epoch + 1 == n_epochs:
                elapsed = time.monotonic() - started
                left = elapsed / (epoch + 1 - first) * (n_epochs - epoch - 1)
                log.info("DensityFlow training (seed %d): epoch %d/%d, loss %.4f, valid %.4f, cost %.4f, "
                         "density %.4f; %.0f s, about %.0f s left", cfg.seed, epoch + 1, n_epochs, row["loss"],
                         row["valid"], row["cost"], row["density"], elapsed, left)
            if ckpt is not None and epoch + 1 < n_epochs and time.monotonic() - last_write >= checkpoint_seconds:
                self._checkpoint(ckpt, state, gen, epoch)
                last_write = time.monotonic()
        if ckpt is not None:
            ckpt.unlink(missing_ok=True)
        # Inference and distillation use the EMA weights. The EMA also averaged the spectral-norm
        # power-iteration vectors, which are then no longer singular vectors of the averaged
        # weights: re-run the iterations, then eval mode freezes them.
        self.surrogate.load_state_dict(ema_s.module.state_dict())
        self.field.load_state_dict(ema_f.module.state_dict())
        refresh_spectral_norms(self.surrogate)
        refresh_spectral_norms(self.field)

    def _fit_key(self, X: np.ndarray, y: np.ndarray) -> str:
        """Hash of the settings, the device type, the mutable mask, this package's source and the
        (subsampled) training data of one ``fit`` (a checkpoint of other code, immutables or device
        type is never resumed: CUDA and CPU arithmetic differ)."""
        h = hashlib.sha256(json.dumps(dataclasses.asdict(self.config), sort_keys=True).encode())
        h.update(self.device.type.encode())
        h.update(self._mutable_mask(X.shape[1]).tobytes())
        h.update(code_fingerprint("recourselab.densityflow").encode())
        h.update(np.ascontiguousarray(X, dtype=np.float32).tobytes())
        h.update(np.ascontiguousarray(y, dtype=np.int64).tobytes())
        return h.hexdigest()[:16]

    def _checkpoint(self, path: Path, state: dict[str, Any], gen: torch.Generator, epoch: int) -> None:
        blob = {name: obj.state_dict() for name, obj in state.items()}
        blob |= {"epoch": epoch, "generator": gen.get_state(), "log": self.log_.rows}
        buf = io.BytesIO()
        torch.save(blob, buf)
        write_bytes(path, buf.getvalue())
        log.debug("checkpoint after epoch %d: %s", epoch, path)

    def _resume(self, path: Path, state: dict[str, Any], gen: torch.Generator, n_epochs: int) -> int:
        """Load a checkpoint into ``state`` and ``gen``; returns the first epoch still to run."""
        try:
            # CPU: the generator state must stay there; load_state_dict moves the rest to its device.
            blob = torch.load(path, map_location="cpu", weights_only=True)
            for name, obj in state.items():
                obj.load_state_dict(blob[name])
            gen.set_state(blob["generator"])
            epoch = int(blob["epoch"])
        except Exception as err:  # noqa: BLE001 - any unreadable checkpoint gets the same message
            raise RecourselabError(f"cannot resume DensityFlow training from checkpoint {path} ({error_reason(err)}); "
                                   "delete the file to train from scratch") from err
        self.log_.rows = [dict(r) for r in blob["log"]]
        log.info("resuming DensityFlow training after epoch %d of %d from %s", epoch + 1, n_epochs, path)
        return epoch + 1

    # ------------------------------------------------------------------ distillation
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
        if not _is_int(budget) or budget < 0:
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
        gen = torch.Generator(device="cpu").manual_seed(cfg.seed + 1)
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
                    z, _, _ = integrate(self.field, Xt[idx], target, rtol=cfg.rtol_train, atol=cfg.atol_train,
                                        method=cfg.method)
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
            with _frozen(self.surrogate):
                for _ in range(cfg.distill_gen_steps):
                    real = torch.randint(0, len(yt), (cfg.batch_size,), generator=gen).to(self.device)
                    loss, _ = self.generator_loss(Xt[real], self._flip(yt[real], gen), rtol=cfg.rtol_train,
                                                  atol=cfg.atol_train, y=yt[real])
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

    # ------------------------------------------------------------------ inference
    def default_target(self, n: int) -> np.ndarray:
        """The schema's favourable class for every row (the ``target=None`` of :meth:`generate`)."""
        if self.schema is None:
            raise DataError("target=None needs a schema (its favourable class); pass target explicitly")
        return np.full(n, self.schema.favourable_index, dtype=np.int64)

    name = "densityflow"

    def explain(self, factuals: np.ndarray | pd.DataFrame, target: np.ndarray | int | None = None, *,
                budget: int | None = None, oracle: Any = None,
                budget_name: str = VERIFY_BUDGET) -> Counterfactuals:
        """:meth:`generate` behind the common method interface.

        The search queries no model (``queries`` 0, so any ``budget`` holds); with ``oracle`` the n
        rows are verified (one query under ``budget_name``) and ``valid`` is unanimous validity.
        The :class:`CounterfactualResult` is the result's ``result``.
        """
        t0 = time.perf_counter()
        res = self.generate(factuals, target, oracle=oracle, budget_name=budget_name)
        counts = res.verdict.counts() if res.verdict is not None else {}
        return Counterfactuals(
            method=self.name, factuals=res.factuals, counterfactuals=res.counterfactuals,
            counterfactuals_original=res.counterfactuals_original, target=res.target, queries=0,
            wall_time=time.perf_counter() - t0, valid=None if res.verdict is None else res.verdict.unanimous,
            verdict=res.verdict, log={"surrogate_valid": float(res.surrogate_valid.mean()),
                                      "mean_density": float(res.density.mean())} | counts, result=res)

    @torch.no_grad()
    def generate(self, factuals: np.ndarray | pd.DataFrame, target: np.ndarray | int | None = None, *,
                 return_trajectories: bool = False, n_points: int = 20, oracle: Any = None,
                 budget_name: str = VERIFY_BUDGET) -> CounterfactualResult:
        """Counterfactuals for ``factuals`` (n, d) towards ``target`` (n,) or one class.

        ``n_starts`` starts per query (the query itself and Gaussian jitters on mutable
        coordinates, the same offsets for every query) are integrated in batched solves of
        ``solve_queries`` queries each;
        the closest (L2) end state that both proxies label ``target`` is kept, else the closest
        overall. With a schema, end states are snapped to valid points (categorical levels,
        integers) and immutable columns are copied from the factuals.

        Parameters
        ----------
        factuals : encoded rows (n, d), or a raw DataFrame with a schema (its index is kept
            in ``counterfactuals_original``).
        target : class index per row (n,) or one for all. ``None``: the schema's favourable
            class for every row (recourse towards the favourable outcome). Rows the surrogate
            already labels as their target are logged, whichever way the target was given:
            their "counterfactual" is a move further into that class. For binary data pass
            the other class of each row's label to flip every row.
        return_trajectories : also return each query's ODE path.
        n_points : points per path (an integer >= 2), evenly spaced in ODE time.
        oracle : the ensemble (a :class:`~recourselab.models.BlackBox`, a mapping of named models
            or one model) that checks the counterfactuals: the result then carries its
            ``verdict`` (per-model validity and agreement, :meth:`CounterfactualResult.verify`),
            and rows that some member rejects are logged as a warning with counts. None: no
            check, no query.
        budget_name : the oracle budget that the n verification rows count against; one that
            cannot take them raises before any work is done.

        Returns
        -------
        CounterfactualResult

        Raises
        ------
        QueryBudgetExceeded
            ``budget_name`` of ``oracle`` has fewer than n rows left.
        """
        self._require_fit()
        cfg = self.config
        if not _is_int(n_points) or n_points < 2:
            raise DataError(f"n_points must be an integer >= 2 (path points), got {n_points!r}")
        n_points = int(n_points)
        X = self._encode(factuals, "factuals")
        n, d = X.shape
        if n == 0:
            raise DataError("generate: no factual rows")
        if oracle is not None:
            oracle = as_oracle(oracle)
            require_budget(oracle, n, budget_name)  # before the solves, not after them
        if target is None:
            tgt = self.default_target(n)
        else:
            t = np.asarray(target)
            tgt = class_labels(np.full(n, t) if t.ndim == 0 else t, n, "generate target", self.n_classes)
        already = int((self.surrogate.labels(self._tensor(X)).cpu().numpy() == tgt).sum())
        if already:
            log.warning("generate: %d of %d factual rows are already labelled their target class by the surrogate; "
                        "the flow was trained to change the class, so their counterfactuals are moves further "
                        "into it (cost > 0)%s", already, n,
                        "; pass target= to choose the class per row" if target is None else "")
        gen = torch.Generator(device="cpu").manual_seed(cfg.seed + 2)
        # One set of N offsets for every query, so a query's starts do not depend on the batch (the
        # adaptive solver's steps do, within its tolerance: a snapped integer can differ by one unit).
        jit = torch.randn(cfg.n_starts, d, generator=gen).to(self.device) * cfg.jitter * self.field.mutable
        jit[0] = 0.0
        chunks = [self._solve(X[i:i + cfg.solve_queries], tgt[i:i + cfg.solve_queries], jit,
                              n_points if return_trajectories else None)
                  for i in range(0, n, cfg.solve_queries)]
        cf = np.concatenate([c[0] for c in chunks])
        ok = np.concatenate([c[1] for c in chunks])
        traj = np.concatenate([c[2] for c in chunks], axis=1) if return_trajectories else None
        density = self.surrogate.score(self._tensor(cf), torch.as_tensor(tgt, device=self.device)).cpu().numpy()
        original = None
        if self.schema is not None:
            original = self.schema.inverse_transform(cf)
            if isinstance(factuals, pd.DataFrame):
                original.index = factuals.index
        result = CounterfactualResult(
            factuals=X, counterfactuals=cf, counterfactuals_original=original,
            target=tgt, cost_l1=np.abs(cf - X).sum(1), cost_l2=np.linalg.norm(cf - X, axis=1),
            density=density.astype(float), surrogate_valid=ok, trajectories=traj)
        return result if oracle is None else result.verify(oracle, budget_name=budget_name)

    def _solve(self, X: np.ndarray, tgt: np.ndarray, jit: torch.Tensor,
               n_points: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """One batched solve of :meth:`generate` for queries ``X`` (m, d) towards ``tgt`` (m,).

        Returns the chosen end states (m, d), whether the surrogate labels them their target
        (m,) and, with ``n_points``, their paths (n_points, m, d); ``jit`` (N, d) holds the offsets.
        """
        cfg = self.config
        (m, d), N = X.shape, len(jit)
        starts = (self._tensor(X)[:, None, :] + jit).reshape(m * N, d)
        targets = torch.as_tensor(np.repeat(tgt, N), device=self.device)
        try:
            z, _, path = integrate(self.field, starts, targets, rtol=cfg.rtol_test, atol=cfg.atol_test,
                                   method=cfg.method, n_points=n_points or 2)
        except AssertionError as e:  # torchdiffeq's adaptive solvers assert on a vanishing step
            if "underflow in dt" not in str(e):
                raise
            raise DataError(f"the flow's ODE solve diverged ({cfg.method}: step size underflow) on a batch of {m} "
                            f"queries; the velocity field is NaN or stiff there (re-run train_flow if its weights "
                            f"are damaged, or pass fewer queries per solve with solve_queries)") from e
        if not torch.isfinite(z).all():
            bad = int((~torch.isfinite(z)).any(dim=1).reshape(m, N).any(dim=1).sum())
            raise DataError(f"the flow's ODE solve diverged (NaN or infinite end states) for {bad} of {m} "
                            f"queries; the model's weights may be damaged (re-run train_flow)")
        z = z.clamp(-self.C, self.C).cpu().numpy().astype(float)
        mutable = self.field.mutable.cpu().numpy().astype(bool)
        if self.schema is not None:
            z = self.schema.snap(z)
        z[:, ~mutable] = np.repeat(X, N, axis=0)[:, ~mutable]
        ok = (self.surrogate.labels(self._tensor(z)) == targets).cpu().numpy().reshape(m, N)
        l2 = np.linalg.norm(z.reshape(m, N, d) - X[:, None, :], axis=2)
        choice = np.where(ok.any(1), np.where(ok, l2, np.inf).argmin(1), l2.argmin(1))
        rows = np.arange(m) * N + choice
        traj = None
        if n_points is not None:
            traj = path[:, torch.as_tensor(rows, device=path.device)].cpu().numpy().astype(float)
        return z[rows], ok[np.arange(m), choice], traj

    # ------------------------------------------------------------------ persistence
    #: The files of a saved DensityFlow.
    FILES = ("surrogate.pt", "generator.pt", "densityflow.json")
    WEIGHT_FILES = ("surrogate.pt", "generator.pt")

    def file_bytes(self, name: str) -> bytes:
        """The contents of one of :attr:`FILES` (torch state dicts; the JSON config holds their sha256)."""
        self._require_fit()
        if name == "densityflow.json":
            weights = {f: hashlib.sha256(self.file_bytes(f)).hexdigest() for f in self.WEIGHT_FILES}
            return json_bytes({"config": dataclasses.asdict(self.config), "d": int(self.field.mutable.numel()),
                               "weights_sha256": weights,
                               "n_classes": self.n_classes, "C": self.C, "queries_used": int(self.queries_used_),
                               "mutable": self.field.mutable.cpu().numpy().astype(bool).tolist(),
                               "dataset": None if self.schema is None else self.schema.dataset})
        module = {"surrogate.pt": self.surrogate, "generator.pt": self.field}[name]
        buf = io.BytesIO()
        torch.save(module.state_dict(), buf)
        return buf.getvalue()

    def write_file(self, name: str, path: str | Path) -> Path:
        """Write one of :attr:`FILES` atomically to ``path``."""
        return write_bytes(path, self.file_bytes(name))

    def save(self, directory: str | Path) -> Path:
        """Write ``surrogate.pt``, ``generator.pt`` (state dicts) and ``densityflow.json``.

        All three are serialised before the first is written, so a model that cannot be
        serialised leaves an earlier save in ``directory`` whole; ``densityflow.json`` records
        the sha256 of both weights files, so :meth:`load` refuses a mix of two saves (one
        interrupted between its files).
        """
        directory = Path(directory)
        contents = {name: self.file_bytes(name) for name in self.FILES}
        for name, data in contents.items():
            write_bytes(directory / name, data)
        return directory

    #: Settings that shape the networks: fixed once they are built (fit or load).
    ARCHITECTURE = ("hidden", "embed_dim", "score_mode", "field_spectral_norm")

    def with_settings(self, **settings: Any) -> DensityFlow:
        """Change settings in place (e.g. distillation or inference ones of a fitted model).

        Raises
        ------
        ConfigError
            An unknown setting (the valid ones are listed), a value out of range, or an
            architecture setting (:attr:`ARCHITECTURE`) of a model whose networks exist.
        """
        valid = {f.name for f in dataclasses.fields(DensityFlowConfig)}
        unknown = sorted(set(settings) - valid)
        if unknown:
            raise ConfigError(f"unknown DensityFlow settings {unknown}; valid: {', '.join(sorted(valid))}")
        fixed = sorted(k for k in settings if k in self.ARCHITECTURE and settings[k] != getattr(self.config, k))
        if fixed and getattr(self, "surrogate", None) is not None:
            raise ConfigError(f"cannot change {fixed} of a built DensityFlow (they shape its networks); "
                              "create and fit a new one")
        self.config = dataclasses.replace(self.config, **settings)
        return self

    @classmethod
    def load(cls, directory: str | Path, *, schema: Schema | None = None, device: str = "cpu") -> DensityFlow:
        """Restore a saved DensityFlow (weights loaded with ``weights_only=True``)."""
        directory = Path(directory)
        if not (directory / "densityflow.json").is_file():
            raise MissingArtifactError(f"no saved DensityFlow in {directory} (densityflow.json is missing)")
        meta_path = directory / "densityflow.json"
        meta = read_json(meta_path, keys=["config", "d", "n_classes", "C", "mutable"])
        _check_meta(meta, meta_path)
        saved = meta.get("dataset")
        if schema is not None:
            if (saved is not None and saved != schema.dataset) or schema.n_encoded != meta["d"]:
                raise DataError(f"the DensityFlow in {directory} was trained for dataset {saved!r} ({meta['d']} "
                                f"encoded columns), not for the given schema of {schema.dataset!r} "
                                f"({schema.n_encoded} columns)")
        elif saved is not None:
            log.warning("the DensityFlow in %s was trained for dataset %r but is loaded without its schema: its "
                        "counterfactuals will not be snapped to valid levels and ranges, nor decoded to original "
                        "units; pass schema= (e.g. Schema.load of the prepared split's schema.json)", directory, saved)
        try:
            flow = cls(schema=schema, mutable=np.array(meta["mutable"]), device=device, **meta["config"])
            flow.build(meta["d"], meta["n_classes"], meta["C"])
        except (RecourselabError, TypeError, ValueError) as err:
            raise ArtifactError(f"{meta_path} does not describe a valid DensityFlow ({error_reason(err)}); "
                                f"{RESTORE_HINT}") from err
        for name, module in (("surrogate.pt", flow.surrogate), ("generator.pt", flow.field)):
            path = directory / name
            if not path.is_file():
                raise MissingArtifactError(f"the DensityFlow in {directory} lacks its weights file {name}")
            data = path.read_bytes()
            expected = meta.get("weights_sha256", {}).get(name)  # older saves lack it: not checked
            if expected is not None and hashlib.sha256(data).hexdigest() != expected:
                stage = "distill" if meta.get("queries_used", 0) else "train_flow"  # distill records its queries
                raise ChecksumError(f"{path} is not the weights file that {meta_path.name} was saved with (sha256 "
                                    f"differs; truncated, altered, a save interrupted between its files, or a file "
                                    f"from another model); {restore_hint(path, stage=stage, dataset=saved)}")
            try:
                state = torch.load(io.BytesIO(data), map_location=flow.device, weights_only=True)
            except Exception as err:  # noqa: BLE001 - a truncated or foreign file: one message
                raise ArtifactError(f"cannot load {path} ({error_reason(err)}); {RESTORE_HINT}") from err
            try:
                module.load_state_dict(state)
            except Exception as err:  # noqa: BLE001 - keys or shapes that the saved settings do not build
                lines = [line.strip() for line in str(err).splitlines() if line.strip()]
                more = f" and {len(lines) - 2} more" if len(lines) > 2 else ""
                raise ArtifactError(f"{path} does not fit the networks that {meta_path.name} describes "
                                    f"({' '.join(lines[:2])}{more}); {RESTORE_HINT}") from err
        flow.queries_used_ = meta.get("queries_used", 0)
        flow.surrogate.eval()
        flow.field.eval()
        return flow
