"""Tests of recourselab.errors: the did-you-mean hint and the traceback filter."""

import logging
import sys

import pytest

from recourselab.errors import (
    PREFECT_RUN_LOGGERS,
    DataError,
    UnknownKeyError,
    _ReportedOnce,
    did_you_mean,
    quiet_known_tracebacks,
)
from recourselab.orchestration import worker_logging


def test_did_you_mean_names_the_closest_word_or_nothing():
    assert did_you_mean("mooons", ["moons", "adult"]) == " (did you mean 'moons'?)"
    assert did_you_mean("zzz", ["moons", "adult"]) == ""


def test_unknown_key_error_prints_its_message_without_quotes():
    assert str(UnknownKeyError("unknown model 'x'; valid: a, b")) == "unknown model 'x'; valid: a, b"


def _record(logger: str, exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except BaseException:  # noqa: BLE001 - the record carries whatever was raised
        info = sys.exc_info()
    return logging.LogRecord(logger, logging.ERROR, __file__, 1, "Encountered exception: %r", (exc,), info)


@pytest.fixture
def clean_prefect_loggers():  # noqa: ANN201 - fixture
    saved = {n: list(logging.getLogger(n).filters) for n in PREFECT_RUN_LOGGERS}
    ours = logging.getLogger("recourselab")  # worker_logging sets it up as in a worker process
    state = (list(ours.handlers), ours.propagate, ours.level)
    yield
    for name, filters in saved.items():
        logging.getLogger(name).filters[:] = filters
    ours.handlers[:], ours.propagate, ours.level = state


def _pass_filters(record: logging.LogRecord) -> logging.LogRecord:
    assert logging.getLogger(record.name).filter(record)
    return record


def _dropped(record: logging.LogRecord) -> bool:
    return not logging.getLogger(record.name).filter(record)


def test_known_errors_and_failed_states_are_left_to_the_caller(clean_prefect_loggers):
    quiet_known_tracebacks()
    for name in PREFECT_RUN_LOGGERS:  # the stage reports it once, naming the task
        assert _dropped(_record(name, DataError("column 'age' is missing")))
        finished = logging.LogRecord(name, logging.ERROR, __file__, 1, "Finished in state Failed('x')", (), None)
        assert _dropped(finished)
        assert not _dropped(logging.LogRecord(name, logging.INFO, __file__, 1, "Finished in state Completed()", (),
                                              None))
    # the flow re-raises every exception to its caller, who prints it
    assert _dropped(_record("prefect.flow_runs", ZeroDivisionError("a bug")))


def test_other_exceptions_keep_their_traceback(clean_prefect_loggers):
    quiet_known_tracebacks()
    record = _pass_filters(_record("prefect.task_runs", ZeroDivisionError("a bug")))
    assert record.exc_info is not None and "Traceback" in logging.Formatter().format(record)


def test_filter_is_installed_once_and_only_on_the_named_loggers(clean_prefect_loggers):
    logger = logging.getLogger("prefect.task_runs")  # an earlier test may have installed it already
    logger.filters[:] = [f for f in logger.filters if not isinstance(f, _ReportedOnce)]
    quiet_known_tracebacks()
    quiet_known_tracebacks()
    assert sum(isinstance(f, _ReportedOnce) for f in logger.filters) == 1
    record = _pass_filters(_record("prefect.other", DataError("x")))
    assert record.exc_info is not None


def test_worker_processes_install_the_filter(clean_prefect_loggers):
    for name in PREFECT_RUN_LOGGERS:
        logging.getLogger(name).filters.clear()
    worker_logging(logging.INFO)
    assert _dropped(_record("prefect.task_runs", DataError("x")))
