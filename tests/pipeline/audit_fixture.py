"""A tiny, hand-made pipeline run for the audit tests: prepared data, DensityFlow and DISCOVER outputs,
headline metrics, an ensemble manifest and (optionally) the evaluate stage's tables.

The dataset ``compas`` (a hand-made stand-in) has numerical ``age`` and ``hours`` and categorical
immutable ``sex`` and ``race``.
DensityFlow's counterfactuals raise ``hours``; rows listed in ``violations`` also flip ``sex`` (an
immutable-feature violation). Member ``rf`` rejects every counterfactual of a woman whose row id is
even, so validity differs by sex (a flagged gap).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from recourselab.data.schema import Schema
from recourselab.io import RECOURSE_SCHEMA, write_json, write_parquet

DATASET = "compas"
N_ROWS = 40


def toy_schema() -> tuple[Schema, pd.DataFrame]:
    """The schema and the raw test rows (original units, with ``row_id``)."""
    rng = np.random.default_rng(0)
    raw = pd.DataFrame({
        "age": rng.integers(18, 80, N_ROWS).astype(float),
        "hours": rng.normal(40, 8, N_ROWS).round(1),
        "sex": np.where(np.arange(N_ROWS) % 2 == 0, "Female", "Male"),
        "race": np.where(np.arange(N_ROWS) % 3 == 0, "A", "B"),
        "income": np.arange(N_ROWS) % 2,
    })
    schema = Schema.fit(raw, dataset=DATASET, target="income", favourable=1, categorical=["sex", "race"],
                        integer=["age"], immutable=["sex", "race"])
    return schema, raw.assign(row_id=np.arange(100, 100 + N_ROWS))


def write_fixture(root: str | Path, *, moved: Sequence[int] = (), noise: Sequence[int] = (),
                  invalid: Sequence[int] = (), violations: Sequence[int] = (3, 7), evaluate: bool = True,
                  certified: bool = False) -> Path:
    """Write the run under ``root/data``; return ``root``.

    Parameters
    ----------
    moved : positions (0..N_ROWS-1) whose DensityFlow counterfactual moves by 0.5 in ``hours`` (encoded).
    noise : positions whose counterfactual moves by 1e-9 (numerical noise).
    invalid : positions every ensemble member rejects (validity flips to False).
    violations : positions whose counterfactual flips the immutable ``sex``.
    evaluate : also write data/evaluate/compas/{methods.json,rows.parquet}.
    certified : whether DISCOVER's lightgbm run is certified (its svm run always is).
    """
    root = Path(root)
    data = root / "data"
    schema, raw = toy_schema()
    encoded = schema.transform(raw[schema.feature_names])
    prepared = data / "prepared" / DATASET / "seed=0"
    prepared.mkdir(parents=True, exist_ok=True)
    schema.save(prepared / "schema.json")
    test = pd.DataFrame(encoded, columns=schema.encoded_columns)
    test.insert(0, "row_id", raw["row_id"].to_numpy())
    test["y"] = raw["income"].to_numpy()
    write_parquet(prepared / "test.parquet", test)

    cols = schema.encoded_columns
    cf = encoded.copy()
    cf[:, cols.index("hours")] += 1.0
    cf[list(moved), cols.index("hours")] += 0.5
    cf[list(noise), cols.index("hours")] += 1e-9
    original = schema.inverse_transform(cf)
    sex = schema.slices()["sex"]
    for i in violations:  # flip the sex level: encode the other level
        other = "Male" if original.loc[i, "sex"] == "Female" else "Female"
        cf[i, sex] = schema.transform(raw.loc[[i], schema.feature_names].assign(sex=other))[0, sex]
    original = schema.inverse_transform(cf)
    delta = cf - encoded
    table = pd.DataFrame({"row_id": raw["row_id"].to_numpy(), "target": np.ones(N_ROWS, dtype=int)})
    table[[f"cf__{c}" for c in cols]] = cf
    table = pd.concat([table, original.add_prefix("cf_original__")], axis=1)
    table["cost_l1"] = np.abs(delta).sum(axis=1)
    table["cost_l2"] = np.sqrt((delta ** 2).sum(axis=1))
    table["density"] = np.linspace(-2, 1, N_ROWS)
    table["surrogate_valid"] = True
    woman_even = (raw["sex"].to_numpy() == "Female") & (np.arange(N_ROWS) % 4 == 0)
    for member in ("knn", "rf", "svm"):
        labels = np.ones(N_ROWS, dtype=int)
        if member == "rf":
            labels[woman_even] = 0
        labels[list(invalid)] = 0
        table[f"label__{member}"] = labels
    recourse = data / "recourse" / DATASET / "seed=0"
    recourse.mkdir(parents=True, exist_ok=True)
    write_parquet(recourse / "counterfactuals.parquet", table,
                  {"dataset": DATASET, "seed": 0, "method": "densityflow", "params_hash": "p" * 64,
                   "code_hash": "c" * 64, "code_version": "0.0.0"}, schema=RECOURSE_SCHEMA)

    for model, ok in (("lightgbm", certified), ("svm", True)):
        disc = data / "discover" / DATASET / model / "seed=0"
        disc.mkdir(parents=True, exist_ok=True)
        n = 20
        dcf = encoded[:n].copy()
        dcf[:, cols.index("age")] -= 0.3
        dt = pd.DataFrame({"row_id": raw["row_id"].to_numpy()[:n], "factual_score": np.linspace(0.1, 0.45, n),
                           "score": np.linspace(0.3, 0.9, n), "target": np.linspace(0.4, 1.0, n),
                           "edited": True})
        dt[[f"cf__{c}" for c in cols]] = dcf
        dt = pd.concat([dt, schema.inverse_transform(dcf).add_prefix("cf_original__"),
                        raw.loc[:n - 1, schema.feature_names].reset_index(drop=True).add_prefix("factual_original__")],
                       axis=1)
        write_parquet(disc / "counterfactuals.parquet", dt, {"dataset": DATASET, "seed": 0, "model": model},
                      schema=RECOURSE_SCHEMA)
        write_json(disc / "metrics.json", {
            "feasible": ok, "feasible_rate": float(ok), "OT_x": 0.04, "OT_y": 0.02, "UCL_x": 0.05 if ok else 0.3,
            "U_x": 0.1, "UCL_y": 0.03, "U_y": 0.05, "certified_x_holdout": 0.9, "queries": 1200,
            "repaired_rows": 2 if ok else 0, "certified_by": "polish" if ok else None,
            "selection_queries": 40, "n_factuals": n})

    metrics = data / "metrics" / DATASET
    metrics.mkdir(parents=True, exist_ok=True)
    per_seed = {"lof_inlier_rate": 0.9, "lof_inlier_rate_real": 0.95, "iforest_inlier_rate": 0.6,
                "iforest_inlier_rate_real": 0.4, "queries_used": 480, "evaluation_queries": 80, "n_queries": N_ROWS}
    write_json(metrics / "densityflow.json", {
        "per_seed": {"0": per_seed}, "seeds": [0],
        "summary": {k: {"mean": v, "std": None, "n": 1} for k, v in per_seed.items()}})
    ensemble = data / "ensemble" / DATASET / "seed=0"
    ensemble.mkdir(parents=True, exist_ok=True)
    (ensemble / "manifest.json").write_text(json.dumps({"ensemble": ["knn", "rf", "svm"], "models": {}}))

    if evaluate:
        ev = data / "evaluate" / DATASET
        ev.mkdir(parents=True, exist_ok=True)
        write_json(ev / "methods.json", {"dataset": DATASET, "seeds": [0], "methods": [
            {"method": m, "setting": "default", "validity_mean": v, "validity_unanimous": v, "validity_majority": v,
             "cost_l1": 1.0, "cost_l2": 0.8, "plausibility_lof": 0.9, "plausibility_iforest": 0.5,
             "immutable_violations": 0, "queries": 500, "wall_time_s": 1.0, "validity_mean_std": None}
            for m, v in (("densityflow", 0.9), ("dice", 0.7))]})
        write_parquet(ev / "rows.parquet", pd.DataFrame({
            "method": ["densityflow"] * 5 + ["dice"] * 5, "setting": "default", "seed": 0, "row": list(range(5)) * 2,
            "valid_unanimous": [True] * 8 + [False] * 2, "agreement": 1.0, "cost_l1": np.linspace(0.5, 2, 10),
            "cost_l2": np.linspace(0.4, 1.5, 10)}))
    return root
