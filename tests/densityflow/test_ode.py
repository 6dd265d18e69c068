"""The ODE: exact kinetic energy, immutable coordinates frozen by the velocity mask."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from recourselab.densityflow.config import DensityFlowConfig
from recourselab.densityflow.ode import VelocityField, integrate
from recourselab.errors import ConfigError


class ConstantField(VelocityField):
    """v(z, t) = c, whatever the inputs (masked like the real field)."""

    def __init__(self, c: torch.Tensor, mutable: torch.Tensor) -> None:
        super().__init__(len(c), 2, mutable)
        self.c = nn.Parameter(c.clone())

    def forward(self, t, z, x_src, target):
        return self.c.expand_as(z) * self.mutable


def test_kinetic_energy_of_a_constant_field_is_norm_squared_times_T():
    c = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    field = ConstantField(c, torch.ones(3)).double()
    x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    z, energy, path = integrate(field, x, torch.zeros(5, dtype=torch.long), rtol=1e-8, atol=1e-8, n_points=5)
    torch.testing.assert_close(energy, torch.full((5,), float((c * c).sum()), dtype=torch.float64))
    torch.testing.assert_close(z, x + c)  # T = 1
    torch.testing.assert_close(path[2], x + 0.5 * c)


class LinearInTimeField(ConstantField):
    """v(z, t) = c t: the energy is the integral of ||c||^2 t^2 over [0, 1], ||c||^2 / 3."""

    def forward(self, t, z, x_src, target):
        return self.c.expand_as(z) * t * self.mutable


def test_kinetic_energy_integrates_the_squared_speed_over_time():
    c = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    field = LinearInTimeField(c, torch.tensor([1.0, 1.0, 0.0])).double()  # the last coordinate frozen
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    z, energy, path = integrate(field, x, torch.zeros(4, dtype=torch.long), rtol=1e-9, atol=1e-9, n_points=3)
    moving = c * torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(energy, torch.full((4,), float((moving * moving).sum() / 3), dtype=torch.float64))
    torch.testing.assert_close(z, x + 0.5 * moving)  # the integral of c t over [0, 1]
    torch.testing.assert_close(path[1], x + 0.125 * moving)  # at t = 1/2


def test_masked_coordinates_never_move():
    mutable = torch.tensor([1.0, 0.0, 1.0, 0.0])
    torch.manual_seed(0)
    field = VelocityField(4, 3, mutable, hidden=16, embed_dim=4)
    x = torch.randn(20, 4)
    target = torch.randint(0, 3, (20,))
    v = field(torch.tensor(0.3), x, x, target)
    assert (v[:, [1, 3]] == 0).all() and (v[:, [0, 2]] != 0).all()
    z, energy, _ = integrate(field, x, target)
    # dopri5's dense output re-rounds unchanged coordinates by at most an ulp or so
    torch.testing.assert_close(z[:, [1, 3]], x[:, [1, 3]], rtol=0, atol=1e-6)
    assert not torch.allclose(z[:, [0, 2]], x[:, [0, 2]])
    assert (energy > 0).all()


def test_adjoint_gives_the_same_end_state_and_gradients_flow_to_embeddings():
    torch.manual_seed(1)
    field = VelocityField(3, 2, torch.ones(3), hidden=16, embed_dim=4).double()
    x = torch.randn(6, 3, dtype=torch.float64)
    target = torch.tensor([0, 1, 0, 1, 0, 1])
    direct, _, _ = integrate(field, x, target, rtol=1e-7, atol=1e-7)
    adjoint, e_adj, _ = integrate(field, x, target, rtol=1e-7, atol=1e-7, adjoint=True)
    torch.testing.assert_close(direct, adjoint, rtol=1e-5, atol=1e-6)
    e_adj.sum().backward()
    assert field.embed.weight.grad is not None and field.embed.weight.grad.abs().sum() > 0


class CountingField(LinearInTimeField):
    """Counts its evaluations."""

    calls = 0

    def forward(self, t, z, x_src, target):
        CountingField.calls += 1
        return super().forward(t, z, x_src, target)


def test_fixed_rk4_steps_evaluate_the_field_four_times_per_step_and_integrate_a_polynomial_exactly():
    c = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    field = CountingField(c, torch.ones(3)).double()
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    settings = DensityFlowConfig(train_steps=2).train_solver()
    assert settings["method"] == "rk4" and settings["step_size"] == 0.5
    CountingField.calls = 0
    z, energy, _ = integrate(field, x, torch.zeros(4, dtype=torch.long), **settings)
    assert CountingField.calls == 4 * 2
    torch.testing.assert_close(z, x + 0.5 * c)  # RK4 is exact for the speed c t and the energy's ||c||^2 t^2
    torch.testing.assert_close(energy, torch.full((4,), float((c * c).sum() / 3), dtype=torch.float64))


def test_without_train_steps_the_training_solves_are_adaptive_at_the_training_tolerances():
    cfg = DensityFlowConfig(train_steps=None, method="bosh3", rtol_train=1e-5, atol_train=1e-6)
    assert cfg.train_solver() == {"method": "bosh3", "rtol": 1e-5, "atol": 1e-6}
    with pytest.raises(ConfigError, match="train_steps"):
        DensityFlowConfig(train_steps=0)
