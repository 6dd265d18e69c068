"""Benchmark of DISCOVER: speed (reference and scale configurations) and quality (paper Table 2).

Speed: COMPAS + LightGBM, reference configuration (N=10, T=20, M=10, k=3, h=3, Monte Carlo,
step 0.1 as in the released code) at n = 25, 50, 100, 200, 1000, 10000 factual rows, plus the scale
configuration (n=10000, N=50, T=100, M=50, k=100). Printed with the ratio to the paper's
runtimes (Table 5: 34.8 s at n=25 ... 499.3 s at n=200) and the targets (<= 1 s at n=50,
<= 2 s at n=200, <= 60 s for the scale configuration).

Quality: {compas, german, heloc} x {svm, mlp, rf, xgboost, lightgbm}, seed-0 prepared data,
each model fitted with ``fit_model`` on the default profile's fixed hyperparameters plus the
first value of each grid entry. Protocol (the paper's): 50 factual rows sampled (seed 0) from
the test split among those the model predicts unfavourable; target y* = 1 - Beta(0.1, 0.9)
(seed 0). Reported: OT(x) (trimmed SW^2, 5000 directions, delta 0.1), OT(y) (trimmed W^2,
delta 0.1), MMD^2, AReS cost, certified feasibility, for the default solver settings (T=100,
M=200, k=3, h=1, step 0.2), for the paper's released configuration (T=100, M=200, k=3, h=3,
step 0.1; its README's ``continuous_step``), for the defaults with ``stop="certified"``, and for
the defaults with ``stop="ot_y"`` at the paper's OT(y) of the dataset (``matched_ot_y``: the OT(x)
spent to reach the paper's output alignment; the level is the paper's figure x (1 - 2 delta),
i.e. converted to this project's convention; the released COMPAS notebook likewise passes a
baseline's OT(y) to its solver as ``target_ot_y``), the same with 5x the proposals (M 1000) and
3x the iterations (T 300) (``matched_ot_y_search_x5``), with means over the five models
next to the paper's figures (COMPAS 0.059 / 0.141, HELOC 0.051 / 0.160, German 0.012 / 0.229).
``fresh_direction_certified_x``: on how many of 200 fresh sets of N directions the returned
counterfactuals still pass the input certificate (threshold recalibrated on each set); the
certificate is computed on the run's own N directions, which the search has seen. Configuration
``resample_directions``: the defaults with fresh directions at every iteration.
OT(x) and OT(y) are also reported in the DCE reference code's convention (``*_reference``:
each sample trimmed at its own quantiles, exact OT of the kept points, times 1 / (1 - 2 delta);
about 1.25x this project's figures). The released DISCOVER notebook computes its OT(x) / OT(y)
with a module of the same name (``explainers.distances``, 5000 directions, delta 0.1), so the
paper's figures are most likely in that convention; the target is judged in both.

DCE (``dce``): the gradient baseline against DISCOVER on the same differentiable model, per
dataset a torch MLP (``fit_torch_mlp``, hidden (64, 64), 300 epochs, seed 0) on the seed-0 train
split, the same 50 factual rows and target, both with the default settings (DCE: T 100 gradient
steps moving every row, at its default step size 0.05 and at 0.2 and 1.0; DISCOVER: T 100, M 200,
k 3, h 1): OT(x), OT(y), certification, queries and wall time.

HELOC is read from ``$RECOURSELAB_DATA_DIR`` (default: ../shared/data next to the repository).
Configurations ``step_range_factuals`` and ``paper_budget_factual_range``: numerical steps scaled
by the factual sample's own spread (``step_range="factuals"``, as the released notebook's
``use_global_ranges=False``), with the default settings and with the released configuration.
Configuration ``kappa_0``: the defaults without the eta interval's narrowing (the released
reference code skips it; the spec and the default keep DCE's kappa 0.05).

Grid (``grid``, not run by default; 30-40 min of solver time, HELOC half of it):
does any setting meet the paper's point on all three datasets? Two grids over the levers of the
OT(x) / OT(y) trade-off, on the quality part's factual samples, models and target. ``levers``: the
full factorial of ``stop`` (stalled, certified), ``step_range`` (training, factuals),
``resample_directions`` (off, on), ``eta_r`` (1.0, 0.7) and ``kappa`` (0.05, 0), solver seed 0.
``stops``: with fresh directions, ``eta_r`` (1.0, 0.7) x stop rule (first certificate; first
certificate with ``U_y_margin`` 0.10; stalled; stalled with ``tol`` 0.01) x ``max_iter`` (100,
200), solver seeds 0, 1 and 2. ``python bench/discover.py grid [DATASETS|summary]`` writes
bench/results/discover_grid_<dataset>.json (one file per dataset, so datasets can run in parallel
processes; a run of some datasets only writes their files) and, after a run of all three or with
``summary``, bench/results/discover_grid.json, the per-setting summary over the dataset files
present: mean OT(x) / OT(y) over the five models as multiples of the paper's figures (this
project's convention and the reference-code one), certified pairs, and whether the setting meets
the issue's target (5/5 certified, OT(y) <= paper, OT(x) <= 1.5x paper) on each dataset and on all
three (``None`` while a dataset file is missing); discover_grid.png plots it (``summary``: only
the summary and plot, from the files present; files of different commits or grids are refused).

Writes bench/results/discover.json. Run: ``python bench/discover.py [speed,quality,dce] [CONFIGS]``
(default: all parts; CONFIGS, a comma-separated list of quality configuration labels, re-measures
only those and ``default`` and keeps the other configurations' figures in the JSON, which may then
mix figures of two code versions: re-run every configuration after a solver change).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if (REPO.parent / "shared" / "data").is_dir():
    os.environ.setdefault("RECOURSELAB_DATA_DIR", str(REPO.parent / "shared" / "data"))

from recourselab.config import BUILTIN_MONOTONE, Params, parse_params  # noqa: E402
from recourselab.data import dataset_from_params, prepare_splits  # noqa: E402
from recourselab.discover import (  # noqa: E402
    DCE,
    Discover,
    DiscoverSettings,
    NotCertifiedWarning,
    fit_torch_mlp,
    make_target,
    sample_factuals,
)
from recourselab.discover.metrics import sw2_reference, w2_reference  # noqa: E402
from recourselab.discover.setup import holdout_certified_x  # noqa: E402
from recourselab.io import write_bytes  # noqa: E402
from recourselab.models import BlackBox, FitContext, fit_model  # noqa: E402
from recourselab.rng import numpy_rng  # noqa: E402
from recourselab.runtime import limit_threads  # noqa: E402

log = logging.getLogger("bench.discover")
OUT = Path(__file__).parent / "results" / "discover.json"

DATASETS = ("compas", "german", "heloc")
MODELS = ("svm", "mlp", "rf", "xgboost", "lightgbm")
SIZES = (25, 50, 100, 200, 1000, 10000)
PAPER_RUNTIME = {25: 34.8, 50: 61.5, 100: 146.1, 150: 322.3, 200: 499.3}  # Table 5, COMPAS + LightGBM
SPEED_TARGET = {50: 1.0, 200: 2.0}
SCALE = {"n_projections": 50, "max_iter": 100, "trials": 50, "top_k": 100}
SCALE_TARGET = 60.0
PAPER_QUALITY = {"compas": (0.059, 0.141), "heloc": (0.051, 0.160), "german": (0.012, 0.229)}
PAPER_BUDGET = {"max_iter": 100, "trials": 200, "top_k": 3, "h": 3, "step": 0.1}  # the released configuration
STOP_CERTIFIED = {"stop": "certified"}  # default settings, stop at the first certified edited iterate
SEARCH_X5 = {"trials": 1000, "max_iter": 300}  # 5x the default proposals per iteration, 3x the iterations
ETA_R = (0.8, 0.7, 0.6)  # lower upper ends of the eta interval: the input term keeps a weight while OT(y) is violated
RESAMPLE = {"resample_directions": True}  # fresh N directions per iteration: the search cannot fit one fixed set
FACTUAL_RANGE = {"step_range": "factuals"}  # steps scaled by the factual sample's spread (the released notebook)
NO_NARROWING = {"kappa": 0.0}  # the eta rule without interval narrowing, as the released reference code runs it
CONFIGS = (("default", {}), ("paper_budget", PAPER_BUDGET), ("stop_certified", STOP_CERTIFIED),
           *((f"eta_r_{r}", {"eta_r": r}) for r in ETA_R), ("resample_directions", RESAMPLE),
           ("step_range_factuals", FACTUAL_RANGE), ("paper_budget_factual_range", PAPER_BUDGET | FACTUAL_RANGE),
           ("kappa_0", NO_NARROWING))
REFERENCE = {"n_projections": 10, "max_iter": 20, "trials": 10, "top_k": 3, "h": 3, "step": 0.1}
N_FACTUALS = 50
DCE_LR = (0.05, 0.2, 1.0)  # DCE's default step size and two larger ones (its gradients vanish where the MLP saturates)
TARGET = make_target("beta", a=0.1, b=0.9, seed=0)


GRID_LEVERS = {"stop": ("stalled", "certified"), "step_range": ("training", "factuals"),
               "resample_directions": (False, True), "eta_r": (1.0, 0.7), "kappa": (0.05, 0.0)}
GRID_STOP_RULES = {"certified": {"stop": "certified"},
                   "certified_U_y_margin_0.10": {"stop": "certified", "U_y_margin": 0.10},
                   "stalled": {"stop": "stalled"}, "stalled_tol_0.01": {"stop": "stalled", "tol": 0.01}}
DEFAULT_LEVERS = {"stop": "stalled", "step_range": "training", "resample_directions": False, "eta_r": 1.0,
                  "kappa": 0.05}  # the solver's defaults, one point of the levers grid
GRID_STOPS = {"eta_r": (1.0, 0.7), "stop_rule": tuple(GRID_STOP_RULES), "max_iter": (100, 200)}
GRID_STOPS_SEEDS = (0, 1, 2)


def matched_ot_y(ds: str) -> dict[str, Any]:
    """Stop at the paper's OT(y) for ``ds``, converted to this project's convention (x (1 - 2 delta))."""
    return {"stop": "ot_y", "stop_ot_y": PAPER_QUALITY[ds][1] * (1 - 2 * DiscoverSettings().metric_delta)}


def configs(ds: str, only: Sequence[str] | None = None) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The quality configurations for ``ds``: :data:`CONFIGS`, ``matched_ot_y`` and the same stop
    with a 5x proposal and 3x iteration budget (``matched_ot_y_search_x5``: does more search buy
    a lower OT(x) at the paper's OT(y)?); with ``only``, those labels (``default`` always)."""
    every = (*CONFIGS, ("matched_ot_y", matched_ot_y(ds)), ("matched_ot_y_search_x5", matched_ot_y(ds) | SEARCH_X5))
    if only is None:
        return every
    unknown = sorted(set(only) - {label for label, _ in every})
    if unknown:
        raise SystemExit(f"unknown quality configuration(s) {unknown}; valid: {', '.join(k for k, _ in every)}")
    return tuple((label, kw) for label, kw in every if label == "default" or label in only)


def fit(name: str, prepared: Any, params: Params) -> Any:
    """``fit_model`` with the profile's fixed hyperparameters + the first value of each grid entry."""
    spec = getattr(params.models, name)
    hyper = dict(spec.fixed) | {k: v[0] for k, v in spec.grid.items()}
    X, y = prepared.arrays("train")
    if spec.max_fit_rows and len(y) > spec.max_fit_rows:
        X, y = X[:spec.max_fit_rows], y[:spec.max_fit_rows]
    Xv, yv = prepared.arrays("val")
    ctx = FitContext(X_val=Xv, y_val=yv, seed=0, n_classes=prepared.schema.n_classes, n_threads=1)
    with limit_threads(1):
        return fit_model(name, hyper, X, y, ctx)


def factual_sample(X: np.ndarray, scores: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """``n`` rows as :func:`sample_factuals` draws them (predicted unfavourable, b < 0.5, without
    replacement; else the ``n`` lowest-scoring rows); beyond the data size, unfavourable rows drawn
    with replacement from the same stream (speed benchmark only)."""
    if len(X) >= n:
        return X[sample_factuals(scores, n, seed=seed)]
    rng = numpy_rng("discover.factuals", seed=seed)  # sample_factuals' stream
    return X[np.sort(rng.choice(np.flatnonzero(scores < 0.5), n, replace=True))]


def run(model: Any, schema: Any, factuals: np.ndarray, **settings: Any) -> tuple[Any, float]:
    solver = Discover(BlackBox({"model": model}, schema=schema), schema=schema, **settings)
    t0 = time.perf_counter()
    with warnings.catch_warnings(), limit_threads(1):
        warnings.simplefilter("ignore", NotCertifiedWarning)
        result = solver.solve(factuals, TARGET)
    return result, time.perf_counter() - t0


FRESH_DRAWS = 200


def fresh_direction_rate(result: Any, draws: int = FRESH_DRAWS) -> float:
    """Share of ``draws`` fresh sets of N directions on which the returned iterate still passes the
    input certificate (:func:`holdout_certified_x` with this bench's own direction stream)."""
    s = DiscoverSettings.from_kwargs(**{k: v for k, v in result.settings.items() if k != "lr"})  # DCE adds lr
    return holdout_certified_x(result.counterfactuals, result.factuals, s, sets=draws, key=(12345,))


def summary(result: Any, wall: float, fresh: bool = False) -> dict[str, Any]:
    """The reported numbers of one run; ``fresh``: also :func:`fresh_direction_rate`."""
    m = result.metrics
    return {"wall_s": wall, "feasible": result.feasible, "OT_x": m["OT_x"], "OT_x_minmax": m["OT_x_minmax"],
            "OT_y": m["OT_y"],
            "OT_x_reference": sw2_reference(result.counterfactuals, result.factuals),
            "OT_y_reference": w2_reference(result.scores, result.target_values),
            "MMD2": m["MMD2"], "ares_cost": m["ares_cost"], "UCL_x": m["UCL_x"], "U_x": m["U_x"],
            "UCL_y": m["UCL_y"], "U_y": m["U_y"], "edited_rows": m["edited_rows"],
            "iterations": int(result.log["iteration"].iloc[-1]), "returned_iteration": result.iteration,
            "queries": result.queries} | (
                {"fresh_direction_certified_x": fresh_direction_rate(result)} if fresh else {}) | (
                {"stop_ot_y_reached": m["stop_ot_y_reached"]} if "stop_ot_y_reached" in m else {})


SPEED_REPEATS = 3  # the median of this many runs per size (the paper reports means of 5)


def timed(model: Any, schema: Any, factuals: np.ndarray, settings: dict[str, Any]) -> tuple[Any, float, list[float]]:
    """The result of one run and the median wall time of ``SPEED_REPEATS`` identical runs (seconds)."""
    walls = []
    for _ in range(SPEED_REPEATS):
        res, wall = run(model, schema, factuals, **settings)
        walls.append(wall)
    return res, float(np.median(walls)), walls


def speed_row(res: Any, wall: float, walls: list[float], settings: dict[str, Any]) -> dict[str, Any]:
    row = summary(res, wall) | {"wall_s_runs": walls, "settings": res.settings}
    row["full_T"] = row["iterations"] == settings["max_iter"]  # a run that stopped early would time fewer steps
    if not row["full_T"]:
        log.warning("a speed run stopped after %d of %d iterations", row["iterations"], settings["max_iter"])
    return row


def bench_speed(params: Params) -> dict[str, Any]:
    prepared = prepare_splits(dataset_from_params("compas", params), 0, params.prepare.split)
    model = fit("lightgbm", prepared, params)
    X = np.concatenate([prepared.arrays(s)[0] for s in ("train", "val", "test")])
    scores = model.predict_proba(X)[:, prepared.schema.favourable_index]
    out: dict[str, Any] = {"reference": {}, "repeats": SPEED_REPEATS,
                           "config": "COMPAS + LightGBM, N=10 T=20 M=10 k=3 h=3 step 0.1 monte_carlo"}
    log.info("speed: COMPAS + LightGBM, reference configuration (N=10 T=20 M=10 k=3 h=3 step 0.1), median of %d",
             SPEED_REPEATS)
    log.info("%7s %9s %10s %9s %8s %8s %6s", "n", "wall [s]", "paper [s]", "speed-up", "OT(x)", "OT(y)",
             "target")
    for n in SIZES:
        res, wall, walls = timed(model, prepared.schema, factual_sample(X, scores, n), REFERENCE)
        row = speed_row(res, wall, walls, REFERENCE)
        paper = PAPER_RUNTIME.get(n)
        row["paper_s"], row["speedup"] = paper, (paper / wall if paper else None)
        target = SPEED_TARGET.get(n)
        row["target_s"], row["meets_target"] = target, (wall <= target if target else None)
        out["reference"][str(n)] = row
        log.info("%7d %9.3f %10s %9s %8.4f %8.4f %6s", n, wall, f"{paper:.1f}" if paper else "-",
                 f"x{paper / wall:.0f}" if paper else "-", row["OT_x"], row["OT_y"],
                 ("ok" if row["meets_target"] else "MISS") if target else "")
    res, wall, walls = timed(model, prepared.schema, factual_sample(X, scores, 10000), REFERENCE | SCALE)
    row = speed_row(res, wall, walls, REFERENCE | SCALE) | {"target_s": SCALE_TARGET,
                                                            "meets_target": wall <= SCALE_TARGET}
    out["scale"] = row
    log.info("scale configuration n=10000 N=50 T=100 M=50 k=100: %.1f s (target <= %.0f s: %s), queries %d",
             wall, SCALE_TARGET, "ok" if row["meets_target"] else "MISS", row["queries"])
    return out


def _verdict(meets: bool | None) -> str:
    return "(target: default settings only)" if meets is None else "meets target" if meets else "misses target"


def provenance() -> dict[str, Any]:
    """When, where and from which commit a section of the results was measured."""
    import datetime
    import subprocess

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "src", "bench", "params.yaml"], cwd=REPO,
                                    capture_output=True, text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = None, None
    return {"commit": commit, "dirty": dirty,
            "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "cpu_count": os.cpu_count()}


def bench_quality(params: Params, only: Sequence[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ds in DATASETS:
        prepared = prepare_splits(dataset_from_params(ds, params), 0, params.prepare.split)
        X_test, _ = prepared.arrays("test")
        out[ds] = {"models": {}}
        for name in MODELS:
            t0 = time.perf_counter()
            model = fit(name, prepared, params)
            fit_s = time.perf_counter() - t0
            scores = model.predict_proba(X_test)[:, prepared.schema.favourable_index]
            factuals = factual_sample(X_test, scores, N_FACTUALS)
            entry = {"fit_s": fit_s, "n_unfavourable_test": int((scores < 0.5).sum())}
            for label, settings in configs(ds, only):
                res, wall = run(model, prepared.schema, factuals, **settings)
                entry[label] = summary(res, wall, fresh=True)
            out[ds]["models"][name] = entry
            d = entry["default"]
            log.info("%-7s %-9s default: OT(x) %.4f OT(y) %.4f MMD %.4f feasible %-5s %.2fs", ds, name, d["OT_x"],
                     d["OT_y"], d["MMD2"], d["feasible"], d["wall_s"])
        px, py = PAPER_QUALITY[ds]
        for label, _ in configs(ds, only):
            rows = [out[ds]["models"][m][label] for m in MODELS]
            keys = ("OT_x", "OT_x_minmax", "OT_y", "OT_x_reference", "OT_y_reference", "MMD2", "ares_cost",
                    "fresh_direction_certified_x")
            mean = {k: float(np.mean([r[k] for r in rows])) for k in keys}
            mean["feasible"] = int(sum(r["feasible"] for r in rows))
            mean["OT_x_ratio_to_paper"] = mean["OT_x"] / px
            mean["OT_x_minmax_ratio_to_paper"] = mean["OT_x_minmax"] / px
            mean["OT_y_ratio_to_paper"] = mean["OT_y"] / py
            # the acceptance target is defined for the default settings; other configurations are compared only
            mean["meets_quality_target"] = bool(mean["feasible"] == len(MODELS) and mean["OT_y"] <= py
                                                and mean["OT_x"] <= 1.5 * px) if label == "default" else None
            mean["OT_x_reference_ratio_to_paper"] = mean["OT_x_reference"] / px
            mean["OT_y_reference_ratio_to_paper"] = mean["OT_y_reference"] / py
            mean["meets_quality_target_reference"] = bool(
                mean["feasible"] == len(MODELS) and mean["OT_y_reference"] <= py
                and mean["OT_x_reference"] <= 1.5 * px) if label == "default" else None
            out[ds][f"mean_{label}"] = mean
            log.info("%-7s mean %-12s OT(x) %.4f (paper %.3f, x%.2f; min-max/one-hot %.4f) OT(y) %.4f (paper %.3f, "
                     "x%.2f) MMD %.4f feasible %d/5 (on fresh directions %.2f) -> %s", ds, label, mean["OT_x"], px,
                     mean["OT_x_ratio_to_paper"], mean["OT_x_minmax"],
                     mean["OT_y"], py, mean["OT_y_ratio_to_paper"], mean["MMD2"], mean["feasible"],
                     mean["fresh_direction_certified_x"],
                     _verdict(mean["meets_quality_target"]))
            log.info("%-7s      %-12s reference-code convention: OT(x) %.4f (x%.2f) OT(y) %.4f (x%.2f) -> %s", ds,
                     label, mean["OT_x_reference"], mean["OT_x_reference_ratio_to_paper"], mean["OT_y_reference"],
                     mean["OT_y_reference_ratio_to_paper"],
                     _verdict(mean["meets_quality_target_reference"]))
    return out


def grid_runs() -> list[tuple[str, int, dict[str, Any]]]:
    """(grid, solver seed, settings) of the ``levers`` and ``stops`` grids (see the module docstring)."""
    runs = [("levers", 0, dict(zip(GRID_LEVERS, values, strict=True)))
            for values in itertools.product(*GRID_LEVERS.values())]
    for eta_r, rule, max_iter in itertools.product(*GRID_STOPS.values()):
        settings = {"resample_directions": True, "eta_r": eta_r, "max_iter": max_iter} | GRID_STOP_RULES[rule]
        runs += [("stops", seed, settings) for seed in GRID_STOPS_SEEDS]
    return runs


def bench_grid(params: Params, ds: str) -> list[dict[str, Any]]:
    """Every run of :func:`grid_runs` on every model of ``ds`` (the quality part's samples and target)."""
    prepared = prepare_splits(dataset_from_params(ds, params), 0, params.prepare.split)
    X_test, _ = prepared.arrays("test")
    rows: list[dict[str, Any]] = []
    runs = grid_runs()
    for name in MODELS:
        model = fit(name, prepared, params)
        scores = model.predict_proba(X_test)[:, prepared.schema.favourable_index]
        factuals = factual_sample(X_test, scores, N_FACTUALS)
        for grid, seed, settings in runs:
            res, wall = run(model, prepared.schema, factuals, **settings, seed=seed)
            m = res.metrics
            rows.append({"grid": grid, "seed": seed, "settings": settings, "model": name, "feasible": res.feasible,
                         "OT_x": m["OT_x"], "OT_y": m["OT_y"],
                         "OT_x_reference": sw2_reference(res.counterfactuals, res.factuals),
                         "OT_y_reference": w2_reference(res.scores, res.target_values),
                         "UCL_x": m["UCL_x"], "U_x": m["U_x"], "UCL_y": m["UCL_y"], "U_y": m["U_y"], "wall_s": wall})
        log.info("grid %s %s: %d runs, %d certified", ds, name, len(runs),
                 sum(r["feasible"] for r in rows if r["model"] == name))
    return rows


def _grid_key(r: dict[str, Any]) -> tuple[str, str, int]:
    return r["grid"], json.dumps(r["settings"], sort_keys=True), r["seed"]


def grid_summary(rows: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per (grid, settings, seed): each dataset's mean OT(x) / OT(y) over the models as multiples of
    the paper's figures (this project's convention and the reference-code one), certified pairs and
    whether the issue's target holds (``meets_target``, ``meets_target_reference``); ``meets_all``
    (``None`` unless all of :data:`DATASETS` are in ``rows``)."""
    keys = {ds: {_grid_key(r) for r in runs} for ds, runs in rows.items()}
    if len({frozenset(k) for k in keys.values()}) > 1:
        raise SystemExit(f"the grid files of {sorted(rows)} hold different settings (another grid definition): "
                         "re-run them with this script")
    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    for ds, runs in rows.items():
        px, py = PAPER_QUALITY[ds]
        groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
        for r in runs:
            groups.setdefault(_grid_key(r), []).append(r)
        for key, group in groups.items():
            entry = out.setdefault(key, {"grid": key[0], "settings": json.loads(key[1]), "seed": key[2]})
            certified = int(sum(r["feasible"] for r in group))
            cell: dict[str, Any] = {"certified": certified}
            for suffix in ("", "_reference"):
                rx = float(np.mean([r[f"OT_x{suffix}"] for r in group])) / px
                ry = float(np.mean([r[f"OT_y{suffix}"] for r in group])) / py
                cell |= {f"OT_x{suffix}_ratio_to_paper": rx, f"OT_y{suffix}_ratio_to_paper": ry,
                         f"meets_target{suffix}": bool(certified == len(group) == len(MODELS)
                                                       and ry <= 1.0 and rx <= 1.5)}
            entry[ds] = cell
    complete = set(rows) == set(DATASETS)
    for entry in out.values():
        for suffix in ("", "_reference"):
            meets = [entry[ds][f"meets_target{suffix}"] for ds in DATASETS] if complete else None
            entry[f"meets_all{suffix}"] = all(meets) if meets is not None else None
    return sorted(out.values(), key=lambda e: (e["grid"], json.dumps(e["settings"], sort_keys=True), e["seed"]))


def plot_grid(path: Path, summary: list[dict[str, Any]], datasets: Sequence[str]) -> None:
    """One panel per dataset and convention: each (setting, seed) at its OT(x) / OT(y) multiples of
    the paper's figures, coloured by certified pairs; the shaded box is the issue's target region."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2 * len(datasets) + 1.0, 7.6), layout="constrained")
    axes = fig.subplots(2, len(datasets), squeeze=False)
    is_default = [e["grid"] == "levers" and e["settings"] == DEFAULT_LEVERS for e in summary]
    for row, (suffix, convention) in enumerate((("", "this project's convention"),
                                                ("_reference", "reference-code convention"))):
        for ax, ds in zip(axes[row], datasets, strict=True):
            rx = [e[ds][f"OT_x{suffix}_ratio_to_paper"] for e in summary]
            ry = [e[ds][f"OT_y{suffix}_ratio_to_paper"] for e in summary]
            ax.fill_between([0, 1.5], 0, 1.0, color="tab:green", alpha=0.15, label="target region")
            points = ax.scatter(rx, ry, c=[e[ds]["certified"] for e in summary], cmap="viridis", vmin=0,
                                vmax=len(MODELS), s=18, edgecolors="none")
            ax.scatter([x for x, d in zip(rx, is_default, strict=True) if d],
                       [y for y, d in zip(ry, is_default, strict=True) if d], marker="*", s=140,
                       facecolors="none", edgecolors="red", label="default settings")
            ax.set_xlim(0, max(rx + [2.0]) * 1.05)
            ax.set_ylim(0, max(ry + [1.2]) * 1.05)
            ax.set_xlabel("OT(x) / paper's OT(x)")
            ax.set_ylabel("OT(y) / paper's OT(y)")
            ax.set_title(f"{ds}, {convention}", fontsize=10)
            ax.legend(loc="upper right", fontsize=7, frameon=False)
    fig.colorbar(points, ax=axes.ravel().tolist(), label="certified pairs (of 5)")
    fig.savefig(path, dpi=120)


def main_grid(params: Params, datasets: Sequence[str]) -> None:
    """The ``grid`` part: run ``datasets`` (each writes its own file); after all of :data:`DATASETS`,
    or with no ``datasets`` (``grid summary``), summarise and plot the dataset files present."""
    unknown = sorted(set(datasets) - set(DATASETS))
    if unknown:
        raise SystemExit(f"unknown dataset(s) {unknown}; valid: {', '.join(DATASETS)} or summary")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    for ds in datasets:
        rows = bench_grid(params, ds)
        path = OUT.with_name(f"discover_grid_{ds}.json")
        write_bytes(path, json.dumps({"runs": rows, "provenance": provenance()}, indent=1, default=float).encode())
        log.info("wrote %s", path)
    if datasets and set(datasets) != set(DATASETS):  # other datasets may be running in parallel processes
        log.info("run python bench/discover.py grid summary once every dataset file is written")
        return
    files = {ds: json.loads(p.read_text()) for ds in DATASETS
             if (p := OUT.with_name(f"discover_grid_{ds}.json")).is_file()}
    if not files:
        raise SystemExit(f"no {OUT.with_name('discover_grid_<dataset>.json')} yet: run "
                         "python bench/discover.py grid DATASETS first")
    commits = {ds: f["provenance"].get("commit") for ds, f in files.items()}
    if len(set(commits.values())) > 1:
        raise SystemExit(f"the grid files come from different commits {commits}: re-run them from one")
    if any(f["provenance"].get("dirty", True) for f in files.values()):
        log.warning("some grid files were measured with uncommitted changes: %s",
                    {ds: f["provenance"].get("dirty") for ds, f in files.items()})
    missing = sorted(set(DATASETS) - set(files))
    if missing:
        log.warning("no grid file for %s: the summary covers %s only", missing, sorted(files))
    summary = grid_summary({ds: f["runs"] for ds, f in files.items()})
    for e in summary:
        cells = "  ".join(f"{ds} {e[ds]['OT_x_ratio_to_paper']:.2f}x/{e[ds]['OT_y_ratio_to_paper']:.2f}x "
                          f"(ref. {e[ds]['OT_x_reference_ratio_to_paper']:.2f}x/"
                          f"{e[ds]['OT_y_reference_ratio_to_paper']:.2f}x) {e[ds]['certified']}/5" for ds in files)
        log.info("%-6s seed %d %-100s %s%s", e["grid"], e["seed"], json.dumps(e["settings"]), cells,
                 "  MEETS ALL" if e["meets_all"] else "")
    counts: dict[str, Any] = {}
    for suffix in ("", "_reference"):
        met = {ds: sum(e[ds][f"meets_target{suffix}"] for e in summary) for ds in files}
        every = sum(e[f"meets_all{suffix}"] for e in summary) if not missing else None
        counts |= {f"meets_target{suffix}_count": met, f"meets_all{suffix}_count": every}
        log.info("settings x seeds meeting the target (%s convention): %s of %d; on all three datasets: %s",
                 "reference-code" if suffix else "this project's", met, len(summary), every)
    plot_grid(OUT.with_name("discover_grid.png"), summary, sorted(files))
    write_bytes(OUT.with_name("discover_grid.json"), json.dumps(
        {"datasets": sorted(files), "summary": summary, **counts, "provenance": provenance()},
        indent=1, default=float).encode())



def bench_dce(params: Params) -> dict[str, Any]:
    """DISCOVER vs the gradient DCE baseline on one torch MLP per dataset (same factuals, target)."""
    out: dict[str, Any] = {}
    log.info("DCE vs DISCOVER on a torch MLP (64, 64), default settings, %d factual rows", N_FACTUALS)
    for ds in DATASETS:
        prepared = prepare_splits(dataset_from_params(ds, params), 0, params.prepare.split)
        schema = prepared.schema
        X, y = prepared.arrays("train")
        X_test, y_test = prepared.arrays("test")
        with limit_threads(1):
            model = fit_torch_mlp(X, y, n_classes=schema.n_classes, hidden=(64, 64), epochs=300, seed=0)
        proba = model.predict_proba(X_test)
        factuals = factual_sample(X_test, proba[:, schema.favourable_index], N_FACTUALS)
        out[ds] = {"test_accuracy": float((proba.argmax(1) == y_test).mean())}
        res, wall = run(model, schema, factuals)
        out[ds]["discover"] = summary(res, wall, fresh=True)
        for lr in DCE_LR:
            t0 = time.perf_counter()
            with warnings.catch_warnings(), limit_threads(1):
                warnings.simplefilter("ignore", NotCertifiedWarning)
                res = DCE(model, schema=schema, lr=lr).solve(factuals, TARGET)
            out[ds][f"dce_lr{lr}"] = summary(res, time.perf_counter() - t0, fresh=True) | {"lr": lr}
        for method in ("discover", *(f"dce_lr{lr}" for lr in DCE_LR)):
            r = out[ds][method]
            log.info("%-7s %-11s OT(x) %.4f OT(y) %.4f (reference convention %.4f / %.4f) MMD %.4f feasible %-5s "
                     "edited rows %2d queries %6d %.2fs", ds, method, r["OT_x"], r["OT_y"], r["OT_x_reference"],
                     r["OT_y_reference"], r["MMD2"], r["feasible"], r["edited_rows"], r["queries"], r["wall_s"])
    return out


#: The bench measures the solver without the default profile's monotone rules (ages only grow there).
NO_RULES = {"prepare": {"monotone": {d: dict.fromkeys(rules) for d, rules in BUILTIN_MONOTONE.items()}}}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)  # Prefect configured logging on import
    logging.getLogger("recourselab").setLevel(logging.WARNING)
    params = parse_params(NO_RULES)
    parts = sys.argv[1].split(",") if len(sys.argv) > 1 else ["speed", "quality", "dce"]
    if "grid" in parts:
        if parts != ["grid"]:
            raise SystemExit("the grid part runs alone: python bench/discover.py grid [DATASETS|summary]")
        arg = sys.argv[2] if len(sys.argv) > 2 else ",".join(DATASETS)
        main_grid(params, [] if arg == "summary" else arg.split(","))
        return
    if len(sys.argv) > 2 and "quality" not in parts:
        raise SystemExit("a list of quality configurations needs the quality part: "
                         "python bench/discover.py quality LABELS")
    results: dict[str, Any] = json.loads(OUT.read_text()) if OUT.is_file() else {}
    results |= {"units": "squared Wasserstein-2 (SW^2, W^2) in the encoded space; seconds",
                "target": TARGET.to_dict(), "n_factuals": N_FACTUALS, "cpu_count": os.cpu_count(),
                "paper_budget": PAPER_BUDGET, "stop_certified": STOP_CERTIFIED, "search_x5": SEARCH_X5,
                "resample_directions": RESAMPLE, "factual_range": FACTUAL_RANGE, "no_narrowing": NO_NARROWING,
                "eta_r": list(ETA_R),
                "matched_ot_y": {ds: matched_ot_y(ds) for ds in DATASETS}}
    if "speed" in parts:
        results["speed"] = bench_speed(params) | {"provenance": provenance()}
    if "quality" in parts:
        only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
        fresh = bench_quality(params, only)
        if only is None or "quality" not in results:
            results["quality"] = fresh | {"provenance": {}}
        else:  # re-measured configurations replace theirs; the others keep their earlier figures
            for ds, new in fresh.items():
                old = results["quality"].setdefault(ds, {"models": {}})
                for name, entry in new["models"].items():
                    old["models"].setdefault(name, {}).update(entry)
                old.update({k: v for k, v in new.items() if k != "models"})
        results["quality"].setdefault("provenance", {})[",".join(only) if only else "all"] = provenance()
    if "dce" in parts:
        results["dce"] = bench_dce(params) | {"provenance": provenance()}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2, default=float))
    log.info("wrote %s", OUT)


if __name__ == "__main__":
    main()
