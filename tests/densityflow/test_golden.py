"""A fixed-seed tiny DensityFlow fit, distillation and generation gives the numbers recorded before
the refactor of issue 32 (settings, module split, RNG-stream table): outputs must not change."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from recourselab.data.synthetic import moons
from recourselab.densityflow import DensityFlow
from recourselab.models import BlackBox, FitContext, fit_model
from recourselab.runtime import limit_threads

#: Every setting given, so that a change of the library's defaults does not show here.
SETTINGS = dict(lambda_valid=1.0, lambda_cost=0.3, lambda_den=0.5, density_quantile=0.7, noise_ratio=0.2,
                lambda_noise=1.0, beta=1.2, c_floor=2.0, score_mode="target", hidden=16, embed_dim=4, epochs=3,
                min_steps=0, batch_size=64, lr_g=2e-3, lr_phi=2e-3, weight_decay=1e-4, warmup_epochs=1, lr_min=1e-6,
                ema_decay=0.9, method="dopri5", train_steps=None, rtol_train=1e-3, atol_train=1e-3, rtol_test=1e-4,
                atol_test=1e-4, adjoint=False, field_spectral_norm=False, max_train_rows=150, distill_epochs=2,
                distill_inner=2, distill_points=8, distill_lr_phi=1e-4, distill_lr_g=5e-5, distill_replay=True,
                distill_gen_steps=2, n_starts=5, jitter=0.05, solve_queries=1024, seed=3)
#: Recorded at commit 2cf60f6 (before the refactor), on CPU with one thread (the thread count changes last digits).
RECORDED = {"used": 20, "sha": "339ce5d6f230abc6a4d26c748c53df9d5d1ee4854db1fcbcb5f6c8fc2684c4e9",
            "first": [-1.432695984840393, 0.09209436178207397], "density0": 3.546476364135742e-06}
#: The same code's output sha on each kind of CPU it was recorded on: torch picks its float kernels by the
#: CPU, so the last digits differ between machines, never between runs on one machine.
KNOWN_SHAS = {RECORDED["sha"]: "commit 2cf60f6, the machines of CI and the sessions before 2026-12-05",
              "6d0007a74c4fe328545daf21b7d7755c08b2dff58a6c0a456bfc0282734aa282":
                  "commit 2ee3481, torch CPU capability AVX512 with AMX (2026-12-05)"}


def test_fixed_seed_fit_distill_generate_gives_the_recorded_numbers():
    df = moons(240, seed=1)
    X = ((df[["x0", "x1"]] - df[["x0", "x1"]].mean()) / df[["x0", "x1"]].std()).to_numpy()
    y = df["y"].to_numpy()
    with limit_threads(1):
        model = DensityFlow(**SETTINGS).fit(X, y)
        box = BlackBox({"knn": fit_model("knn", {"n_neighbors": 5}, X, y, FitContext(X_val=X, y_val=y, seed=0,
                                                                                       n_classes=2))})
        used = model.distill(box, X, y, budget=20)
        res = model.generate(X[:12], target=1 - y[:12])
    arr = np.concatenate([res.counterfactuals.ravel(), res.density, model.log_.frame().to_numpy(float).ravel()])
    sha = hashlib.sha256(arr.astype(np.float64).tobytes()).hexdigest()
    assert used == RECORDED["used"]
    if sha in KNOWN_SHAS:
        return
    # A CPU not recorded yet: the same numbers up to its kernels' rounding (a changed computation moves them
    # further). Add its sha to KNOWN_SHAS once the difference is shown to come from the machine alone.
    assert np.allclose(res.counterfactuals[0], RECORDED["first"], rtol=0, atol=1e-5), (sha, res.counterfactuals[0])
    assert float(res.density[0]) == pytest.approx(RECORDED["density0"], rel=0.1), sha
