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


class ChecksumError(ArtifactError):
    """A file whose sha256 does not match the one its manifest (or declaration) records."""


class UnknownKeyError(RecourselabError, KeyError):
    """A name that a registry does not hold (the message lists the valid names)."""

    def __str__(self) -> str:  # KeyError would show the repr of the message
        return str(self.args[0]) if self.args else ""


class TaskFailedError(RecourselabError):
    """A per-seed task failed with an unexpected (non-recourselab) exception, chained as ``__cause__``."""


#: How Prefect's engines begin the record of a run's final state.
_FINISHED = "Finished in state "


class _ReportedOnce(logging.Filter):
    """Drop the records of Prefect's run loggers that repeat a failure the caller reports itself.

    A stage reports each failure once: the per-seed runner raises one error naming every failed
    (dataset, seed[, model]) and its message, and the stage prints it as its last line. Dropped:

    - a record carrying a :class:`RecourselabError` (bad input, a missing or damaged artifact);
    - on the flow-run logger, every record carrying an exception: the flow re-raises it to its
      caller, which prints it (in one line, or Python's traceback of a bug);
    - an error-level "Finished in state Failed(...)" record, which repeats the run's exception.

    A task's unexpected exception keeps its record and traceback (from a process worker it is the
    only traceback of the bug).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, RecourselabError) or (exc is not None and record.name == "prefect.flow_runs"):
            return False
        return not (record.levelno >= logging.ERROR and str(record.msg).startswith(_FINISHED))


def quiet_known_tracebacks(loggers: Iterable[str] = PREFECT_RUN_LOGGERS) -> None:
    """Let Prefect's run logs leave each failure to its caller, who reports it once (see :class:`_ReportedOnce`).

    Installed by the stages and in every task worker process. Idempotent.

    Parameters
    ----------
    loggers : names of the loggers to filter (default: Prefect's flow- and task-run loggers).
    """
    for name in loggers:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _ReportedOnce) for f in logger.filters):
            logger.addFilter(_ReportedOnce())
