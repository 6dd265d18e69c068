"""Tests of recourselab.errors: the did-you-mean hint and the traceback filter."""

import logging
import sys

import pytest

from recourselab.errors import (
    PREFECT_RUN_LOGGERS,
    DataError,
    UnknownKeyError,
    _KnownErrorTraceback,
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
    assert logging.getLogger(record.name).filter(record)  # never drops a record
    return record


def test_known_error_keeps_its_message_and_loses_its_traceback(clean_prefect_loggers):
    quiet_known_tracebacks()
    for name in PREFECT_RUN_LOGGERS:
        record = _pass_filters(_record(name, DataError("column 'age' is missing")))
        assert record.exc_info is None
        text = logging.Formatter().format(record)
        assert "column 'age' is missing" in text and "Traceback" not in text


def test_other_exceptions_keep_their_traceback(clean_prefect_loggers):
    quiet_known_tracebacks()
    record = _pass_filters(_record("prefect.task_runs", ZeroDivisionError("a bug")))
    assert record.exc_info is not None and "Traceback" in logging.Formatter().format(record)


def test_filter_is_installed_once_and_only_on_the_named_loggers(clean_prefect_loggers):
    logger = logging.getLogger("prefect.task_runs")  # an earlier test may have installed it already
    logger.filters[:] = [f for f in logger.filters if not isinstance(f, _KnownErrorTraceback)]
    quiet_known_tracebacks()
    quiet_known_tracebacks()
    assert sum(isinstance(f, _KnownErrorTraceback) for f in logger.filters) == 1
    record = _pass_filters(_record("prefect.other", DataError("x")))
    assert record.exc_info is not None


def test_worker_processes_install_the_filter(clean_prefect_loggers):
    for name in PREFECT_RUN_LOGGERS:
        logging.getLogger(name).filters.clear()
    worker_logging(logging.INFO)
    record = _pass_filters(_record("prefect.task_runs", DataError("x")))
    assert record.exc_info is None
