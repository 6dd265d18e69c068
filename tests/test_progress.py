"""Progress bars: shown on a terminal, quiet in pipes, logs and CI; never change a result."""

from __future__ import annotations

import io
import logging
import sys

import numpy as np
import pytest

from recourselab.progress import bar, in_ci, interactive


class FakeTTY(io.StringIO):
    """A standard error that says it is a terminal and keeps what is written to it."""

    def isatty(self) -> bool:
        return True


def terminal(monkeypatch) -> FakeTTY:
    """Make standard error a fake terminal outside CI (in the test body: pytest's capture resets
    ``sys.stderr`` after fixtures run)."""
    stream = FakeTTY()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.delenv("CI", raising=False)
    return stream


def test_a_bar_is_quiet_when_stderr_is_not_a_terminal(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.delenv("CI", raising=False)
    progress = bar(range(5), desc="work")
    assert progress.disable and not interactive()
    assert list(progress) == [0, 1, 2, 3, 4]
    assert stream.getvalue() == ""


@pytest.mark.parametrize("value", ["true", "1", "yes"])
def test_a_bar_is_quiet_in_ci_even_on_a_terminal(monkeypatch, value):
    tty = terminal(monkeypatch)
    assert interactive()
    monkeypatch.setenv("CI", value)
    assert in_ci()
    progress = bar(range(3), desc="work")
    assert progress.disable and list(progress) == [0, 1, 2]
    assert tty.getvalue() == ""


@pytest.mark.parametrize("value", ["", "0", "false"])
def test_ci_set_to_a_false_value_is_not_ci(monkeypatch, value):
    terminal(monkeypatch)
    monkeypatch.setenv("CI", value)
    assert not in_ci() and interactive()


def test_a_bar_shows_on_a_terminal(monkeypatch):
    tty = terminal(monkeypatch)
    assert list(bar(range(4), desc="work", unit="step")) == [0, 1, 2, 3]
    assert "work" in tty.getvalue() and "4/4" in tty.getvalue()


def test_the_caller_can_force_a_bar_on_or_off(monkeypatch):
    terminal(monkeypatch)
    assert bar(range(2), enabled=False).disable
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    progress = bar(range(2), desc="forced", enabled=True)
    assert not progress.disable
    list(progress)
    assert "forced" in sys.stderr.getvalue()


def test_a_closed_or_odd_stream_is_not_a_terminal():
    closed = io.StringIO()
    closed.close()
    assert not interactive(closed)
    assert not interactive(object())


def test_a_bar_closes_when_its_loop_is_left_early(monkeypatch):
    tty = terminal(monkeypatch)
    progress = bar(range(10), desc="early")
    assert not progress.disable
    for i in progress:
        if i == 3:
            break
    assert progress.disable, "the bar was left open"  # tqdm marks a closed bar disabled
    assert progress.n == 3 and "early" in tty.getvalue()


def test_tuning_gives_the_same_result_and_logs_with_and_without_its_bar(monkeypatch, caplog):
    from recourselab.config import parse_params
    from recourselab.data import dataset_from_params, prepare_splits
    from recourselab.models.tuning import Split, tune_model

    splits = prepare_splits(dataset_from_params("moons", parse_params({"prepare": {"n_synthetic": 300}})), 0,
                            (0.6, 0.2, 0.2))
    train, val, test = (Split(*splits.arrays(s)) for s in ("train", "val", "test"))

    def tune(progress):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="recourselab.models.tuning"):
            result = tune_model("knn", {"n_neighbors": [1, 5, 25]}, {}, train=train, val=val, test=test, seed=0,
                                n_classes=2, progress=progress)
        return result, [r.getMessage().split(" (fit ")[0] for r in caplog.records]  # timings differ

    stream = terminal(monkeypatch)
    shown, shown_logs = tune(None)  # auto: a terminal, so the bar shows
    assert "tune knn" in stream.getvalue() and "3/3" in stream.getvalue()
    hidden, hidden_logs = tune(False)
    assert shown.cv_results == hidden.cv_results and shown.best_params == hidden.best_params
    assert {k: v for k, v in shown.metrics.items() if not k.endswith("time_s")} == {
        k: v for k, v in hidden.metrics.items() if not k.endswith("time_s")}
    np.testing.assert_array_equal(shown.model.predict_proba(test.X), hidden.model.predict_proba(test.X))
    assert shown_logs == hidden_logs and len(shown_logs) == 4  # one line per grid point and the summary
