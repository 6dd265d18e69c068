"""The generator: a conditional velocity field integrated as a Neural ODE (torchdiffeq).

The state is augmented with the kinetic energy ``e`` (``de/dt = ||v||^2``), so ``e(T)`` is
the exact transport cost of the path. The velocity is multiplied by a mask that is zero on
immutable coordinates: those can never change. On a monotone coordinate the velocity keeps
only its allowed sign, so a path never moves that coordinate the forbidden way.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm
from torchdiffeq import odeint, odeint_adjoint


class VelocityField(nn.Module):
    """``v_theta(z_t, t, x_src, y*)``: SiLU MLP (2 x ``hidden``) over the concatenated inputs.

    Parameters
    ----------
    d : encoded width; n_classes : K; mutable : (d,) 0/1 mask (0 = immutable coordinate).
    monotone : (d,) of -1 / 0 / +1: coordinates whose velocity is clipped to <= 0 / free / >= 0
        (None: all free). Not saved with the weights (the model's settings record it).
    spectral : spectral-normalise the three linear layers (extension, off by default): the
        field's Jacobian stays bounded (about 1.2), so the ODE cannot become stiff in long runs;
        the biases keep the speed itself free.
    """

    def __init__(self, d: int, n_classes: int, mutable: torch.Tensor, *, hidden: int = 128,
                 embed_dim: int = 16, spectral: bool = False, monotone: torch.Tensor | None = None) -> None:
        super().__init__()
        self.embed = nn.Embedding(n_classes, embed_dim)
        wrap = spectral_norm if spectral else (lambda layer: layer)
        self.net = nn.Sequential(wrap(nn.Linear(2 * d + 1 + embed_dim, hidden)), nn.SiLU(),
                                 wrap(nn.Linear(hidden, hidden)), nn.SiLU(), wrap(nn.Linear(hidden, d)))
        self.register_buffer("mutable", mutable.float().clone())
        signs = torch.zeros(d) if monotone is None else monotone.float().clone()
        self.register_buffer("monotone", signs, persistent=False)
        self._ruled = bool((signs != 0).any())

    def forward(self, t: torch.Tensor, z: torch.Tensor, x_src: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        tt = t.reshape(1, 1).expand(len(z), 1).to(z)
        h = torch.cat([z, tt, x_src, self.embed(target)], dim=1)
        v = self.net(h) * self.mutable
        if self._ruled:
            v = torch.where(self.monotone > 0, v.clamp(min=0.0), torch.where(self.monotone < 0, v.clamp(max=0.0), v))
        return v


class AugmentedDynamics(nn.Module):
    """ODE right-hand side over the state ``[z, e]`` (n, d + 1) for fixed sources and targets."""

    def __init__(self, field: VelocityField, x_src: torch.Tensor, target: torch.Tensor) -> None:
        super().__init__()
        self.field = field
        self.x_src = x_src
        self.target = target

    def forward(self, t: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        v = self.field(t, state[:, :-1], self.x_src, self.target)
        return torch.cat([v, (v * v).sum(dim=1, keepdim=True)], dim=1)


def integrate(field: VelocityField, x_src: torch.Tensor, target: torch.Tensor, *, rtol: float = 1e-3,
              atol: float = 1e-3, method: str = "dopri5", adjoint: bool = False, n_points: int = 2,
              step_size: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flow ``x_src`` (n, d) towards classes ``target`` (n,) over t in [0, 1].

    ``step_size`` fixes the step of a fixed-grid ``method`` (e.g. ``rk4``); adaptive methods take
    ``rtol`` / ``atol`` instead.

    Returns
    -------
    z_T : (n, d) end states; energy : (n,) kinetic energy e(T) = integral of ||v||^2;
    path : (n_points, n, d) states at ``n_points`` evenly spaced times (first = x_src).
    """
    dynamics = AugmentedDynamics(field, x_src, target)
    state0 = torch.cat([x_src, x_src.new_zeros(len(x_src), 1)], dim=1)
    times = torch.linspace(0.0, 1.0, max(2, n_points), device=x_src.device, dtype=x_src.dtype)
    solver = {"rtol": rtol, "atol": atol, "method": method}
    if step_size is not None:
        solver["options"] = {"step_size": step_size}
    if adjoint:
        # Every trainable parameter, embeddings included, must be an adjoint parameter.
        states = odeint_adjoint(dynamics, state0, times, adjoint_params=tuple(field.parameters()), **solver)
    else:
        states = odeint(dynamics, state0, times, **solver)
    return states[-1, :, :-1], states[-1, :, -1], states[:, :, :-1]
