"""Exception types and the did-you-mean hint their messages share.

Every error names the offending dataset, column, key or file.
"""

import difflib
import logging
from collections.abc import Iterable

#: Prefect's loggers that print a failed task's or flow's exception with its traceback.
PREFECT_RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


def did_you_mean(word: str, valid: Iterable[str]) -> str:
    """A `` (did you mean 'x'?)`` hint for a misspelled ``word``, or ``""`` when nothing is close."""
    close = difflib.get_close_matches(word, list(valid), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class RecourselabError(Exception):
    """Base class of all recourselab errors."""


class ConfigError(RecourselabError, ValueError):
    """Invalid ``params.yaml`` content: unknown keys, wrong types, impossible values."""


class DataError(RecourselabError, ValueError):
    """Invalid input data: missing columns, single-class targets, non-numeric values..."""


class UnknownCategoryError(DataError):
    """A categorical value that the schema does not know, met at transform time."""


class ArtifactError(DataError):
    """A pipeline artifact (JSON, Parquet, weights) that cannot be read: damaged or truncated."""


class MissingArtifactError(ArtifactError, FileNotFoundError):
    """A pipeline artifact that does not exist (usually: its stage has not run yet)."""


class ChecksumError(DataError):
    """A file whose sha256 does not match the expected one."""


class UnknownKeyError(RecourselabError, KeyError):
    """A name that a registry does not hold (the message lists the valid names)."""

    def __str__(self) -> str:  # KeyError would show the repr of the message
        return str(self.args[0]) if self.args else ""


class _KnownErrorTraceback(logging.Filter):
    """Keep a record's message but drop the traceback of a :class:`RecourselabError` it carries."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], RecourselabError):
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_known_tracebacks(loggers: Iterable[str] = PREFECT_RUN_LOGGERS) -> None:
    """Show recourselab's own errors in Prefect's run logs as one line, without a traceback.

    A :class:`RecourselabError` is bad input or a missing artifact: its message names the
    problem, and the stage prints it once more as its last line; a stack of Prefect's engine
    frames only hides it. Every other exception (a bug) keeps its full traceback. Idempotent.

    Parameters
    ----------
    loggers : names of the loggers to filter (default: Prefect's flow- and task-run loggers).
    """
    for name in loggers:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _KnownErrorTraceback) for f in logger.filters):
            logger.addFilter(_KnownErrorTraceback())
