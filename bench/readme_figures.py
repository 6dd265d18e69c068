"""The README's two pictures: DensityFlow paths on moons and DISCOVER's output CDFs.

- ``docs/img/trajectories.png``: DensityFlow trained on a small moons set (the library's
  synthetic generator, 1000 rows, split 6:2:2 with seed 0), then the ODE paths of a few test
  rows of each class towards the other class (:func:`recourselab.report.densityflow_plots.plot_trajectories`);
- ``docs/img/discover_cdf.png``: DISCOVER's default solver on 50 unfavourable rows of a small
  mixed-type synthetic loans table (the README's DISCOVER example) explaining a scikit-learn
  random forest: CDFs of the factual outputs, the counterfactual outputs and the target
  (:func:`recourselab.report.discover_plots.plot_output_cdfs`).

Deterministic: fixed seeds, one CPU thread, and the figure writer stores no timestamp, so a rerun
writes the same bytes. About half a minute on one core. Needs no pipeline outputs.

Usage: ``python bench/readme_figures.py [OUT_DIR]`` (default ``docs/img`` of the repository).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestClassifier

from recourselab.data import Schema, load_dataset, prepare_splits
from recourselab.densityflow import DensityFlow
from recourselab.discover import Discover, make_target, sample_factuals
from recourselab.report.densityflow_plots import plot_trajectories
from recourselab.report.discover_plots import plot_output_cdfs
from recourselab.runtime import limit_threads

log = logging.getLogger("bench.readme_figures")
OUT_DIR = Path(__file__).resolve().parents[1] / "docs" / "img"
#: A short DensityFlow run on 600 moons training rows (the pipeline's default profile trains longer).
FLOW_SETTINGS = dict(epochs=30, warmup_epochs=1, lr_phi=3e-3, lr_g=3e-3, hidden=64, n_starts=8, lambda_cost=0.2,
                     lambda_den=0.3, ema_decay=0.9, rtol_train=1e-2, atol_train=1e-2, density_quantile=None, seed=0)
#: Test rows of each class whose paths are drawn.
PATHS_PER_CLASS = 6


def loans_table(n: int = 600, seed: int = 0) -> pd.DataFrame:
    """A synthetic loans table (n rows): income, age, debts, job, sex (immutable) and the label ``approved``."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"income": rng.normal(50, 10, n).round(1), "age": rng.integers(18, 70, n),
                       "debts": rng.poisson(2.0, n), "job": rng.choice(["clerk", "manager", "trade"], n),
                       "sex": rng.choice(["f", "m"], n)})
    logit = 0.1 * (df.income - 50) - 0.6 * (df.debts - 2) + 1.0 * (df.job == "manager")
    df["approved"] = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    return df


def trajectories_figure(path: Path) -> Path:
    """DensityFlow on moons: training data by class and the paths of 2 x ``PATHS_PER_CLASS`` test rows."""
    data = prepare_splits(load_dataset("moons", n_synthetic=1000), 0, (0.6, 0.2, 0.2))
    X, y = data.arrays("train")
    flow = DensityFlow(schema=data.schema, **FLOW_SETTINGS).fit(X, y)
    X_test, y_test = data.arrays("test")
    rows = np.concatenate([np.flatnonzero(y_test == c)[:PATHS_PER_CLASS] for c in range(data.schema.n_classes)])
    res = flow.generate(X_test[rows], target=1 - y_test[rows], return_trajectories=True, n_points=30)
    return plot_trajectories(path, X, y, res.trajectories, res.target, factuals=X_test[rows],
                             counterfactuals=res.counterfactuals, feature_names=data.schema.encoded_columns,
                             class_names=list(data.schema.classes), title="DensityFlow on moons")


def discover_figure(path: Path) -> Path:
    """DISCOVER (default settings) on 50 unfavourable loans rows of a random forest: output CDFs."""
    df = loans_table()
    schema = Schema.fit(df, dataset="loans", target="approved", favourable=1, categorical=["job", "sex"],
                        integer=["age", "debts"], immutable=["sex"])
    X = schema.transform(df)
    model = RandomForestClassifier(n_estimators=50, random_state=0).fit(X, df["approved"])
    rows = sample_factuals(model.predict_proba(X)[:, 1], 50, seed=0)
    res = Discover(model, schema=schema, seed=0).solve(df.iloc[rows], make_target("beta", a=0.1, b=0.9, seed=0))
    status = "certified" if res.feasible else "not certified"
    return plot_output_cdfs(path, res.factual_scores, res.scores, res.target_values,
                            title=f"DISCOVER on 50 loans rows, random forest ({status})")


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = Path(argv[0]) if argv else OUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    with limit_threads(1):
        for name, draw in (("trajectories.png", trajectories_figure), ("discover_cdf.png", discover_figure)):
            start = time.perf_counter()
            path = draw(out / name)
            log.info("%s: %.0f KB in %.1f s", path, path.stat().st_size / 1024, time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
