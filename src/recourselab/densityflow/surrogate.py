"""The (K+1)-way NCE surrogate: two proxy classifiers against uniform box noise.

Classes ``0..K-1`` are the data classes, class ``K`` is uniform noise on ``[-C, C]^d``.
The density score of the paper (Prop. 1) is ``S(x | y) = z_y(x) - z_K(x)``, which equals
``log p(x | y)`` up to a constant at the optimum. The generator sees the worst case of the
two proxies: the larger validity loss and the smaller density score.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm

ScoreMode = Literal["target", "max"]


def refresh_spectral_norms(module: nn.Module, iterations: int = 50) -> None:
    """Re-run the power iterations of every spectral-norm layer of ``module`` for its current weights.

    Needed after loading averaged (EMA) weights: the averaged power-iteration vectors u, v are
    not singular vectors of the averaged weight (their norm drops below 1 in long runs), so in
    eval mode the layer would be scaled by a wrong sigma. Leaves ``module`` in eval mode.
    """
    module.train()
    with torch.no_grad():
        for _ in range(iterations):
            for layer in module.modules():
                if parametrize.is_parametrized(layer, "weight"):
                    layer.weight  # noqa: B018 -- a training-mode access runs one power iteration
    module.eval()


def noise_bound(X: np.ndarray, beta: float = 1.2, floor: float = 2.0) -> float:
    """Half-width ``C = max(floor, beta * max |x|_inf)`` of the noise box over training rows (n, d)."""
    return float(max(floor, beta * np.abs(X).max()))


class ProxyC1(nn.Module):
    """3 x ``hidden`` spectral-norm linear layers with LayerNorm and SiLU; ``K + 1`` logits."""

    def __init__(self, d: int, n_classes: int, hidden: int = 128) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = d
        for _ in range(3):
            layers += [spectral_norm(nn.Linear(width, hidden)), nn.LayerNorm(hidden), nn.SiLU()]
            width = hidden
        layers.append(nn.Linear(width, n_classes + 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ProxyC2(nn.Module):
    """2 x ``hidden`` ReLU MLP; ``K + 1`` logits."""

    def __init__(self, d: int, n_classes: int, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_classes + 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Surrogate(nn.Module):
    """The pair of proxies (C1, C2) of the (K+1)-way NCE surrogate.

    Parameters
    ----------
    d : encoded input width; n_classes : K (the noise class is index K).
    score_mode : ``"target"`` (paper: ``z_{y*} - z_K``) or ``"max"`` (reference code:
        ``max_k z_k - z_K`` over data classes).
    """

    def __init__(self, d: int, n_classes: int, *, hidden: int = 128, score_mode: ScoreMode = "target") -> None:
        super().__init__()
        if score_mode not in ("target", "max"):
            raise ValueError(f"score_mode must be 'target' or 'max', got {score_mode!r}")
        self.n_classes = n_classes
        self.score_mode = score_mode
        self.proxies = nn.ModuleList([ProxyC1(d, n_classes, hidden), ProxyC2(d, n_classes, hidden)])

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of both proxies, shape (2, n, K + 1)."""
        return torch.stack([p(x) for p in self.proxies])

    def nce_loss(self, x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor,
                 lambda_noise: float = 1.0) -> torch.Tensor:
        """Sum over proxies of CE(real rows, y) + lambda_noise * CE(noise rows, K)."""
        noise_y = torch.full((len(noise),), self.n_classes, dtype=torch.long, device=noise.device)
        loss = x.new_zeros(())
        for proxy in self.proxies:
            loss = loss + F.cross_entropy(proxy(x), y)
            if len(noise):
                loss = loss + lambda_noise * F.cross_entropy(proxy(noise), noise_y)
        return loss

    def density_scores(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Per-proxy density scores S(x | target), shape (2, n)."""
        z = self.logits(x)
        if self.score_mode == "target":
            data = z.gather(2, target.view(1, -1, 1).expand(len(self.proxies), -1, 1)).squeeze(2)
        else:
            data = z[..., : self.n_classes].max(dim=2).values
        return data - z[..., self.n_classes]

    def score(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Worst-case density score: min over proxies of S(x | target), shape (n,)."""
        return self.density_scores(x, target).min(dim=0).values

    def validity_loss(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Worst-case validity loss: max over proxies of the mean CE(logits, target)."""
        z = self.logits(x)
        return torch.stack([F.cross_entropy(zi, target) for zi in z]).max()

    def labels(self, x: torch.Tensor) -> torch.Tensor:
        """Label both proxies agree on (argmax over K + 1 logits), else -1. Shape (n,)."""
        pred = self.logits(x).argmax(dim=2)
        return torch.where(pred[0] == pred[1], pred[0], torch.full_like(pred[0], -1))

    def target_proba(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Per-proxy softmax probability of ``target`` (over K + 1 classes), shape (2, n)."""
        p = self.logits(x).softmax(dim=2)
        return p.gather(2, target.view(1, -1, 1).expand(len(self.proxies), -1, 1)).squeeze(2)
