"""Exception types and the did-you-mean hint their messages share.

Every error names the offending dataset, column, key or file.
"""

import difflib
from collections.abc import Iterable


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
