"""``recourselab explain``: counterfactuals for new rows, from the trained artifacts of a dataset and seed.

Artifacts (under the data root, ``data/`` by default): the schema in
``prepared/<dataset>/seed=<s>/schema.json``, the tuned ensemble in ``ensemble/<dataset>/seed=<s>/``
and, for DensityFlow, the distilled model in ``distill/<dataset>/seed=<s>/``. Every model query
goes through one :class:`~recourselab.models.BlackBox` and counts, in rows, against the budget
:data:`BUDGET` (``--budget``, unlimited by default).

- ``densityflow``: the ensemble's majority label of each valid row is queried first; the target
  is the other class. The counterfactuals are then queried once more to report which members
  accept them (per-model validity) and their share (agreement). A budget too small for all
  rows leaves the last rows without a target (not explained) or their counterfactuals
  unverified, each one said so.
- ``densityflow_r``: RobustFlow (:class:`~recourselab.methods.robust.RobustFlow`) on the same flow,
  at the ``default`` setting of ``evaluate.methods``: it queries the ensemble for each
  counterfactual and repairs those some member rejects with anchors from the training rows, so it
  needs the prepared training split and more queries. With ``--budget`` its search gets what the
  target and check queries leave (at least one row each).
- ``discover``: the valid rows are DISCOVER's factual population, explained on one model of the
  ensemble (``--model``, default the first of ``discover.models`` it holds) with the ``discover``
  settings of params.yaml. Each row's counterfactual is checked by the ensemble members and the
  model towards the favourable class, and the run reports its certificate.

Immutable features are checked after every method: a changed one is an error, not an output.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pandas as pd

from recourselab.config import Params
from recourselab.data.feature import python_scalar
from recourselab.data.schema import Schema
from recourselab.errors import ConfigError, DataError, MissingArtifactError, RecourselabError, UnknownKeyError
from recourselab.models import BlackBox, QueryBudgetExceeded, load_ensemble, read_manifest
from recourselab.models.verdict import verify
from recourselab.pipeline.explain_rows import check_rows, read_rows

log = logging.getLogger(__name__)

#: The BlackBox budget that every query of ``explain`` counts against.
BUDGET = "explain"
METHODS = ("densityflow", "densityflow_r", "discover")
#: Artifact folder -> (file that marks it complete, stage that writes it, what it holds).
ARTIFACTS = {"prepared": ("schema.json", "prepare", "prepared schema"),
             "ensemble": ("manifest.json", "tune_ensemble", "tuned ensemble"),
             "distill": ("densityflow.json", "distill", "distilled DensityFlow")}
NEEDS = {"densityflow": ("prepared", "ensemble", "distill"), "densityflow_r": ("prepared", "ensemble", "distill"),
         "discover": ("prepared", "ensemble")}


class ImmutableFeatureChanged(RecourselabError, AssertionError):
    """A method returned a counterfactual whose immutable features differ from its factual's."""


class MonotoneRuleBroken(RecourselabError, AssertionError):
    """A method returned a counterfactual that moved a monotone feature the forbidden way."""


@dataclass
class RowResult:
    """The outcome for one input row (values in original units).

    ``counterfactual`` is None when the row was not explained (``error`` says why); ``validity``
    (member -> accepts the target) and ``agreement`` (their share) are None when the
    counterfactual was not verified (``note`` says why). ``prediction`` is the row's class (original
    label) by the ensemble's majority (densityflow) or by the explained model (discover);
    ``target`` the class its counterfactual should get.
    """

    row: int
    input: dict[str, Any]
    counterfactual: dict[str, Any] | None = None
    changed: list[str] = field(default_factory=list)
    prediction: Any = None
    target: Any = None
    validity: dict[str, bool] | None = None
    agreement: float | None = None
    error: str | None = None
    note: str | None = None


@dataclass
class Explanation:
    """Every row's result, in input order, and what the run used (queries in rows)."""

    dataset: str
    seed: int
    method: str
    rows: list[RowResult]
    members: list[str]
    queries: int
    budget: int | None
    model: str | None = None
    certification: dict[str, Any] | None = None

    @property
    def n_explained(self) -> int:
        return sum(r.counterfactual is not None for r in self.rows)


def artifact_dirs(data_root: str | Path, dataset: str, seed: int) -> dict[str, Path]:
    """The artifact folder of every stage ``explain`` reads, for one dataset and seed."""
    return {k: Path(data_root) / k / dataset / f"seed={seed}" for k in ARTIFACTS}


def require_artifacts(dirs: dict[str, Path], names: Sequence[str], dataset: str, seed: int, hint: str = "") -> None:
    """Raise :class:`MissingArtifactError` naming the stage to run for the first missing folder of ``names``."""
    for k in names:
        marker, stage, what = ARTIFACTS[k]
        if not (dirs[k] / marker).is_file():
            raise MissingArtifactError(
                f"no {what} for dataset {dataset!r}, seed {seed}: {dirs[k] / marker} is missing; run "
                f"`recourselab repro` (every stage) or `dvc repro {stage}@{dataset}`{hint}")


def _hint(params: Params, dataset: str, seed: int) -> str:
    notes = []
    if dataset not in params.datasets:
        notes.append(f"dataset {dataset!r} is not in params.yaml datasets ({', '.join(params.datasets)})")
    if seed not in params.seeds:
        notes.append(f"seed {seed} is not in params.yaml seeds {list(params.seeds)}")
    return f" ({'; '.join(notes)})" if notes else ""


def check_immutables(schema: Schema, factuals: np.ndarray, counterfactuals: np.ndarray) -> None:
    """Raise :class:`ImmutableFeatureChanged` unless the immutable encoded columns of
    ``counterfactuals`` (n, d) equal those of ``factuals`` (n, d) exactly."""
    slices = schema.slices()
    moved = {f.name: (factuals[:, slices[f.name]] != counterfactuals[:, slices[f.name]]).any(axis=1)
             for f in schema.features if f.immutable}
    names = [name for name, rows in moved.items() if rows.any()]
    if names:
        n_rows = int(np.logical_or.reduce([moved[name] for name in names]).sum())
        raise ImmutableFeatureChanged(f"the method changed the immutable features {names} of {n_rows} rows; "
                                      "no counterfactual is reported (a bug in the method)")


def check_monotone(schema: Schema, factuals: np.ndarray, counterfactuals: np.ndarray) -> None:
    """Raise :class:`MonotoneRuleBroken` when a monotone column of ``counterfactuals`` (n, d) moved the
    forbidden way from ``factuals`` (n, d) by more than 1e-9 (in z-units)."""
    wrong = np.abs(schema.project_monotone(counterfactuals, factuals) - counterfactuals) > 1e-9
    if wrong.any():
        slices = schema.slices()
        names = [f.name for f in schema.features if f.monotone and wrong[:, slices[f.name]].any()]
        raise MonotoneRuleBroken(f"the method moved the monotone features {names} the forbidden way in "
                                 f"{int(wrong.any(axis=1).sum())} rows; no counterfactual is reported (a bug in "
                                 "the method)")


def counterfactual_values(schema: Schema, given: dict[str, Any],
                          decoded: pd.Series) -> tuple[dict[str, Any], list[str]]:
    """The counterfactual in original units and the names of its changed features.

    A feature counts as changed when its decoded value differs from the given one (beyond the
    rounding of a float's encode-decode round trip); unchanged features keep the given value.
    """
    out, changed = {}, []
    for f in schema.features:
        before, after = given[f.name], python_scalar(decoded[f.name])
        if f.kind == "numerical" and not f.integer:
            same = abs(float(after) - float(before)) <= 1e-9 * max(1.0, abs(float(before)), f.std)
        else:
            same = after == before
        out[f.name] = before if same else (int(after) if f.integer else after)
        if not same:
            changed.append(f.name)
    return out, changed


def _affordable(box: BlackBox, n: int) -> int:
    left = box.remaining(BUDGET)
    return n if left is None else min(n, left)


def _verify(box: BlackBox, rows: list[RowResult], X: np.ndarray, targets: np.ndarray, budget: int | None) -> None:
    """Query the counterfactuals ``X`` (n, d) of ``rows`` that the budget affords; fill validity and agreement."""
    n_check = _affordable(box, len(rows))
    if n_check:
        verdict = verify(box, X[:n_check], targets[:n_check], budget_name=BUDGET)
        per_model = verdict.per_model()
        for i, r in enumerate(rows[:n_check]):
            r.validity = {m: bool(valid[i]) for m, valid in per_model.items()}
            r.agreement = float(verdict.agreement[i])
    for r in rows[n_check:]:
        r.note = (f"unverified: the query budget ({budget} ensemble rows) was spent before this counterfactual "
                  "could be checked; raise --budget")


def run_densityflow(schema: Schema, box: BlackBox, flow: Any, valid: pd.DataFrame,
                    budget: int | None, robust: Any = None) -> list[RowResult]:
    """DensityFlow counterfactuals of the ``valid`` rows (original units), towards the other class
    of the ensemble's majority label, verified by the ensemble; with ``robust`` (a RobustFlow on
    ``flow``) its repaired counterfactuals instead."""
    inputs = valid.to_dict(orient="index")
    rows = [RowResult(row=int(r), input=inputs[r]) for r in valid.index]
    n = _affordable(box, len(rows))
    for r in rows[n:]:
        r.error = (f"not explained: the query budget ({budget} ensemble rows) was spent before this row; each row "
                   f"takes one query for its target class and one to check its counterfactual (--budget "
                   f"{2 * len(rows)} covers all)")
    if n == 0:
        return rows
    X = schema.transform(valid.iloc[:n])
    majority = box.query(X, budget=BUDGET).majority
    target = 1 - majority  # the other class (explain() checks that the data are binary)
    if robust is None:
        cf = flow.generate(X, target=target).counterfactuals
    else:
        left = box.remaining(BUDGET)
        search = None if left is None else left - n  # what the check of the counterfactuals leaves
        if search is not None and search < n:
            for r in rows[:n]:
                r.error = (f"not explained: densityflow_r checks each counterfactual during its search and again "
                           f"after it, so it needs at least 3 queries per row (--budget {3 * len(rows)} or more; "
                           "its anchor repair uses any surplus)")
            return rows
        cf = robust.explain(X, target, budget=search).counterfactuals
    check_immutables(schema, X, cf)
    check_monotone(schema, X, cf)
    decoded = schema.inverse_transform(cf)
    for i, r in enumerate(rows[:n]):
        r.counterfactual, r.changed = counterfactual_values(schema, r.input, decoded.iloc[i])
        r.prediction, r.target = schema.classes[majority[i]], schema.classes[target[i]]
    _verify(box, rows[:n], cf, target, budget)
    return rows


def discover_model(manifest: dict[str, Any], params: Params, model: str | None) -> str:
    """``model``, or the first of ``discover.models`` that the ensemble folder holds."""
    held = list(manifest["members"])
    if model is not None:
        if model not in held:
            raise UnknownKeyError(f"--model {model!r} is not in the tuned ensemble; it holds {', '.join(held)}")
        return model
    for name in params.discover.models:
        if name in held:
            return name
    raise ConfigError(f"the tuned ensemble holds none of discover.models ({', '.join(params.discover.models)}); "
                      f"pass --model, one of {', '.join(held)}")


def run_discover(schema: Schema, box: BlackBox, model: str, valid: pd.DataFrame, params: Params, dataset: str,
                 seed: int, budget: int | None) -> tuple[list[RowResult], dict[str, Any] | None]:
    """DISCOVER on the ``valid`` rows as one factual population; the rows and the run's certificate."""
    from recourselab.discover import Discover, DiscoverSettings, NotCertifiedWarning, make_target

    inputs = valid.to_dict(orient="index")
    rows = [RowResult(row=int(r), input=inputs[r]) for r in valid.index]
    if len(rows) < 2:
        for r in rows:
            r.error = "not explained: DISCOVER explains a population and needs at least 2 valid rows"
        return rows, None
    settings = DiscoverSettings.from_kwargs(**params.discover.solver_for(dataset).model_dump(mode="json"),
                                            seed=seed, budget=BUDGET)
    target = make_target(params.discover.target.kind, seed=seed, **params.discover.target.target_params())
    X = schema.transform(valid)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", NotCertifiedWarning)
            result = Discover.from_settings(box.member(model), schema=schema, settings=settings).solve(X, target)
    except QueryBudgetExceeded as err:
        for r in rows:
            r.error = f"not explained: DISCOVER needs more queries than --budget {budget} allows ({err})"
        return rows, None
    for w in caught:
        log.warning("%s", w.message)
    check_immutables(schema, result.factuals, result.counterfactuals)
    check_monotone(schema, result.factuals, result.counterfactuals)
    fav = schema.favourable_index
    decoded = schema.inverse_transform(result.counterfactuals)
    for i, r in enumerate(rows):
        r.counterfactual, r.changed = counterfactual_values(schema, r.input, decoded.iloc[i])
        r.prediction = schema.classes[fav if result.factual_scores[i] >= 0.5 else 1 - fav]
        r.target = schema.classes[fav]
        if not r.changed:
            r.note = "unchanged: DISCOVER moves the population towards its target, not necessarily every row"
    _verify(box, rows, result.counterfactuals, np.full(len(rows), fav), budget)
    m = result.metrics
    cert = {"model": model, "certified": bool(result.feasible), "n_rows": len(rows),
            **{k: m.get(k) for k in ("UCL_x", "U_x", "UCL_y", "U_y", "OT_x", "OT_y", "edited_rows")},
            "queries": int(result.queries)}
    return rows, cert


def explain(source: str | Path | TextIO, *, dataset: str, seed: int = 0, method: str = "densityflow",
            model: str | None = None, budget: int | None = None, params: Params | None = None,
            data_root: str | Path = "data", device: str = "cpu") -> Explanation:
    """Counterfactuals for the rows of a CSV in original units, from the artifacts of ``dataset`` / ``seed``.

    Parameters
    ----------
    source : CSV path, ``"-"`` (standard input) or a text stream; columns named as the dataset's
        raw features (other columns are ignored).
    method : one of :data:`METHODS`.
    model : DISCOVER's model (discover only).
    budget : most ensemble rows queried in total (``None``: as many as the rows need).
    params : the project's parameters (generate and discover settings); default: the defaults.
    data_root : the folder holding ``prepared/``, ``ensemble/`` and ``distill/``.

    Returns
    -------
    Explanation with one :class:`RowResult` per input row, in input order.

    Raises
    ------
    MissingArtifactError
        An artifact folder is missing (the message names the stage to run).
    DataError, ConfigError
        An unreadable input, an input with none of the feature columns, or a bad option.
    """
    if method not in METHODS:
        raise UnknownKeyError(f"unknown method {method!r}; valid methods: {', '.join(METHODS)}")
    if model is not None and method != "discover":
        raise ConfigError("--model chooses DISCOVER's model; DensityFlow explains against the whole ensemble")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
        raise ConfigError(f"--budget must be a number of ensemble rows >= 0, got {budget!r}")
    params = params if params is not None else Params()
    dirs = artifact_dirs(data_root, dataset, seed)
    require_artifacts(dirs, NEEDS[method], dataset, seed, _hint(params, dataset, seed))
    schema = Schema.load(dirs["prepared"] / ARTIFACTS["prepared"][0])
    if schema.n_classes != 2:
        raise DataError(f"explain targets the other class of a binary dataset; {dataset!r} has "
                        f"{schema.n_classes} classes")
    manifest = read_manifest(dirs["ensemble"])
    members = list(manifest.get("ensemble") or params.tune_ensemble.members)
    chosen = discover_model(manifest, params, model) if method == "discover" else None
    names = members + ([chosen] if chosen is not None and chosen not in members else [])
    box = load_ensemble(dirs["ensemble"], names, schema=schema, seed=seed,
                        budgets=None if budget is None else {BUDGET: budget})
    flow = robust = None
    if method in ("densityflow", "densityflow_r"):
        from recourselab.densityflow import DensityFlow

        flow = DensityFlow.load(dirs["distill"], schema=schema, device=device)
        flow.with_settings(n_starts=params.generate.n_starts, jitter=params.generate.jitter)
    if method == "densityflow_r":
        from recourselab.data import load_prepared
        from recourselab.methods.robust import RobustFlow

        X_train, y_train = load_prepared(dirs["prepared"]).arrays("train")
        setting = params.evaluate.methods.get("densityflow_r", {}).get("default", {})
        robust = RobustFlow(flow, box, X_train, y_train, schema=schema, budget_name=BUDGET, **setting)
    frame = read_rows(source)
    valid, errors = check_rows(frame, schema)
    for row, message in errors.items():
        log.warning("row %d: %s", row, message)
    done, cert = [], None
    if len(valid) and flow is not None:
        done = run_densityflow(schema, box, flow, valid, budget, robust)
    elif len(valid):
        done, cert = run_discover(schema, box, chosen, valid, params, dataset, seed, budget)
    given = [c for c in schema.feature_names if c in frame.columns]
    failed = [RowResult(row=int(r), input={c: frame.at[r, c] for c in given}, error=e) for r, e in errors.items()]
    return Explanation(dataset=dataset, seed=seed, method=method, rows=sorted(done + failed, key=lambda r: r.row),
                       members=list(box.member_names), queries=box.used(BUDGET), budget=budget, model=chosen,
                       certification=cert)


__all__ = ["BUDGET", "METHODS", "Explanation", "ImmutableFeatureChanged", "MonotoneRuleBroken", "RowResult",
           "artifact_dirs", "check_immutables", "check_monotone", "counterfactual_values", "explain",
           "require_artifacts", "run_densityflow", "run_discover"]
