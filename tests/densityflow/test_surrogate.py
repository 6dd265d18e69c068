"""The NCE surrogate: its density score ranks points by true class-conditional density."""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import multivariate_normal, spearmanr

from recourselab.densityflow.surrogate import Surrogate, noise_bound, refresh_spectral_norms


def test_noise_bound():
    X = np.array([[0.5, -3.0], [1.0, 2.0]])
    assert noise_bound(X) == 1.2 * 3.0
    assert noise_bound(X / 10) == 2.0


def test_nce_score_ranks_a_gaussian_mixture_by_density():
    rng = np.random.default_rng(0)
    centres = np.array([[-1.5, 0.0], [1.5, 0.5]])
    X1 = np.vstack([rng.normal(c, [0.5, 0.4], size=(600, 2)) for c in centres])  # class 1: a mixture
    X0 = rng.normal([0.0, -2.0], 0.6, size=(600, 2))                             # class 0
    X = np.vstack([X0, X1]).astype(np.float32)
    y = np.r_[np.zeros(600), np.ones(1200)].astype(np.int64)
    torch.manual_seed(0)
    sur = Surrogate(2, 2, hidden=64)
    opt = torch.optim.Adam(sur.parameters(), lr=3e-3)
    C = noise_bound(X)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    gen = torch.Generator().manual_seed(0)
    for _ in range(1500):
        idx = torch.randint(0, len(y), (256,), generator=gen)
        noise = (torch.rand(128, 2, generator=gen) * 2 - 1) * C
        loss = sur.nce_loss(Xt[idx], yt[idx], noise)
        opt.zero_grad()
        loss.backward()
        opt.step()
    sur.eval()

    def rho(probe: np.ndarray) -> float:
        true = sum(multivariate_normal(c, np.diag([0.25, 0.16])).pdf(probe) for c in centres)
        with torch.no_grad():
            score = sur.score(torch.as_tensor(probe, dtype=torch.float32), torch.ones(len(probe), dtype=torch.long))
        return spearmanr(score.numpy(), true).statistic

    # Fresh samples of the mixture itself: ranking them needs the noise logit (S = z_y - z_K); the
    # class logit alone ranked them at 0.58.
    samples = np.vstack([rng.normal(c, [0.5, 0.4], size=(200, 2)) for c in centres])
    assert rho(samples) >= 0.8, rho(samples)
    box = rng.uniform([-3, -1.5], [3, 2], size=(400, 2))  # and points spread over the data's box
    assert rho(box) >= 0.8, rho(box)


def test_worst_case_aggregation_and_labels():
    torch.manual_seed(0)
    sur = Surrogate(3, 2, hidden=8).eval()  # eval: spectral norm stops its power iterations
    x = torch.randn(10, 3)
    t = torch.ones(10, dtype=torch.long)
    per = sur.density_scores(x, t)
    assert per.shape == (2, 10)
    torch.testing.assert_close(sur.score(x, t), per.min(0).values)
    z = sur.logits(x)
    ce = [torch.nn.functional.cross_entropy(z[i], t) for i in range(2)]
    torch.testing.assert_close(sur.validity_loss(x, t), torch.stack(ce).max())
    lab = sur.labels(x)
    agree = z.argmax(2)[0] == z.argmax(2)[1]
    assert torch.equal(lab[agree], z.argmax(2)[0][agree]) and (lab[~agree] == -1).all()
    sur_max = Surrogate(3, 2, hidden=8, score_mode="max").eval()
    sur_max.load_state_dict(sur.state_dict())
    assert (sur_max.score(x, t) >= sur.score(x, t) - 1e-6).all()


def _sigmas(module: torch.nn.Module) -> list[float]:
    return [float(torch.linalg.matrix_norm(m.weight.detach(), 2)) for m in module.modules()
            if torch.nn.utils.parametrize.is_parametrized(m, "weight")]


def test_refresh_spectral_norms_repairs_averaged_power_iteration_vectors():
    torch.manual_seed(0)
    sur = Surrogate(5, 2, hidden=16).eval()
    assert np.allclose(_sigmas(sur), 1.0, atol=1e-3)
    # an EMA of rotating unit vectors is shorter than 1: eval mode then scales the weight wrongly
    state = {k: v * 0.4 if k.endswith("_u") else v for k, v in sur.state_dict().items()}
    sur.load_state_dict(state)
    assert max(_sigmas(sur)) > 2.0
    refresh_spectral_norms(sur)
    assert not sur.training
    np.testing.assert_allclose(_sigmas(sur), 1.0, atol=1e-3)
