"""The named random streams: unique names, distinct keys, and the numbers the library always drew."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from recourselab.rng import STREAMS, numpy_rng, torch_generator


def _entropies(stream, seed):
    """The stream's entropy lists for ``seed`` and a few values of its other placeholders."""
    others = [k for k in stream.key if isinstance(k, str) and k != "seed"]
    for combo in itertools.product(range(4), repeat=len(others)):
        yield tuple(stream.entropy(seed=seed, **dict(zip(others, combo, strict=True))))


def test_names_are_unique_and_keys_distinct():
    streams = list(STREAMS.values())
    assert len({s.name for s in streams}) == len(streams)
    for kind in ("numpy", "torch"):
        keys = [s.key for s in streams if s.kind == kind]
        assert len(set(keys)) == len(keys), kind


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_no_two_numpy_streams_share_an_entropy(seed):
    """Distinct as numpy reads them: SeedSequence drops trailing zeros, so no key may end in 0."""
    seen: dict[tuple[int, ...], str] = {}
    for s in (s for s in STREAMS.values() if s.kind == "numpy"):
        for ent in _entropies(s, seed):
            trimmed = list(ent)
            while len(trimmed) > 1 and trimmed[-1] == 0:
                trimmed.pop()
            state = tuple(np.random.SeedSequence(trimmed).generate_state(4))
            assert state not in seen or seen[state] == s.name, (s.name, seen.get(state), ent)
            seen[state] = s.name


def test_streams_draw_the_numbers_of_their_keys():
    assert np.array_equal(numpy_rng("discover.directions", seed=3).random(4), np.random.default_rng([3, 4]).random(4))
    assert np.array_equal(numpy_rng("discover.embedding", seed=2, feature=5).random(3),
                          np.random.default_rng([2, 5, 7919]).random(3))
    assert np.array_equal(numpy_rng("seed", seed=9).random(2), np.random.default_rng(9).random(2))
    expected = torch.Generator().manual_seed(5 + 2)
    assert torch.equal(torch.rand(3, generator=torch_generator("densityflow.generate", 5)),
                       torch.rand(3, generator=expected))


def test_unknown_streams_and_placeholders_are_named():
    with pytest.raises(KeyError, match="no numpy stream 'discover.direction'; valid: .*discover.directions"):
        numpy_rng("discover.direction", seed=0)
    with pytest.raises(KeyError, match=r"takes \['seed', 't'\], got \['seed'\]"):
        numpy_rng("discover.directions_at", seed=0)
    with pytest.raises(KeyError, match="no torch stream"):
        torch_generator("discover.directions", 0)
