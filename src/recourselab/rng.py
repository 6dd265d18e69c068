"""The named random streams of one seed: every seeded draw of the library takes its generator here.

One run seed ``s`` feeds several independent streams. A numpy stream is
``numpy.random.default_rng(entropy)`` with an entropy list built from the stream's key, e.g.
``[s, 4]`` for DISCOVER's directions; a torch stream is a CPU ``torch.Generator`` seeded with
``s + offset``. The keys are the ones the library has always used, so the numbers do not
change; tests/test_rng.py checks that names are unique and that no two keys give the same
entropy. Note that numpy's ``SeedSequence`` drops trailing zeros, so ``[s, 0]`` would be the
plain stream ``default_rng(s)``: no key ends in 0.

The plain stream ``default_rng(s)`` itself (key ``("seed",)``) is shared by independent
consumers that each start from the seed: the synthetic generators, a DISCOVER target's draws,
the evaluation query set, the RQ2 rows and the models' own seeded fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Stream:
    """One named stream.

    Attributes
    ----------
    name : the stream's name (``"<package>.<use>"``).
    key : numpy streams: the entropy template, ints and placeholder names (``"seed"`` and the
        stream's own indices, e.g. ``("seed", 2, "t")``); torch streams: ``("seed", offset)``.
    kind : ``"numpy"`` or ``"torch"``.
    doc : what draws from it.
    """

    name: str
    key: tuple[int | str, ...]
    kind: str
    doc: str

    def entropy(self, **values: int) -> list[int]:
        """The entropy list of this stream for the placeholder ``values`` (``seed=...``, ...).

        Raises
        ------
        KeyError
            A placeholder of the key has no value, or a value names no placeholder.
        """
        names = {k for k in self.key if isinstance(k, str)}
        if set(values) != names:
            raise KeyError(f"stream {self.name!r} takes {sorted(names)}, got {sorted(values)}")
        return [int(values[k]) if isinstance(k, str) else k for k in self.key]


#: Every named stream, by name.
STREAMS: dict[str, Stream] = {s.name: s for s in [
    Stream("seed", ("seed",), "numpy", "the plain stream default_rng(seed) (see the module docstring)"),
    Stream("discover.proposals", ("seed", 1), "numpy", "DISCOVER / DCE proposals and strategies of one run"),
    Stream("discover.directions_at", ("seed", 2, "t"), "numpy",
           "DISCOVER directions of outer iteration t with resample_directions"),
    Stream("discover.holdout", ("seed", 3, "k"), "numpy", "holdout direction set k of certified_x_holdout"),
    Stream("discover.directions", ("seed", 4), "numpy", "the run's one set of N directions"),
    Stream("discover.factuals", ("seed", 6), "numpy", "sample_factuals: the factual sample"),
    Stream("discover.bootstrap", ("seed", 8), "numpy", "resample indices of the bootstrap certificate"),
    Stream("discover.metric_directions", ("seed", 5000), "numpy", "directions of the reported OT(x) and MMD"),
    Stream("discover.embedding", ("seed", "feature", 7919), "numpy",
           "the random embedding of categorical feature number `feature`"),
    Stream("densityflow.train", ("seed", 0), "torch", "DensityFlow training: batches, NCE noise, target flips"),
    Stream("densityflow.distill", ("seed", 1), "torch", "DensityFlow distillation: queried rows, NCE noise"),
    Stream("densityflow.generate", ("seed", 2), "torch", "DensityFlow inference: the start offsets"),
]}


def _stream(name: str, kind: str) -> Stream:
    if name not in STREAMS or STREAMS[name].kind != kind:
        valid = sorted(n for n, s in STREAMS.items() if s.kind == kind)
        raise KeyError(f"no {kind} stream {name!r}; valid: {', '.join(valid)}")
    return STREAMS[name]


def numpy_rng(name: str, **values: int) -> np.random.Generator:
    """``numpy.random.default_rng`` of stream ``name`` for ``seed`` and its other placeholders."""
    return np.random.default_rng(_stream(name, "numpy").entropy(**values))


def torch_generator(name: str, seed: int) -> Any:
    """A CPU ``torch.Generator`` of stream ``name`` (seeded with ``seed`` + the stream's offset)."""
    import torch

    offset = _stream(name, "torch").key[1]
    return torch.Generator(device="cpu").manual_seed(int(seed) + int(offset))


__all__ = ["STREAMS", "Stream", "numpy_rng", "torch_generator"]
