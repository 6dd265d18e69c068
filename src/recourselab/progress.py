"""Progress bars for the long loops a user waits on (tuning, training, distillation, searches).

A bar is shown only on an interactive terminal: when standard error is not a TTY (a log
file, a pipe, a captured test) or the ``CI`` environment variable is set, :func:`bar` returns
a disabled bar that writes nothing and iterates exactly like the plain iterable, so results
and log output are the same with and without it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import IO, Any

from tqdm import tqdm

#: Values of ``CI`` that do not mean "running in CI".
_NOT_CI = frozenset({"", "0", "false", "no", "off"})


def in_ci() -> bool:
    """Whether the ``CI`` environment variable says this runs in continuous integration."""
    return os.environ.get("CI", "").strip().lower() not in _NOT_CI


def interactive(stream: IO[str] | None = None) -> bool:
    """Whether bars should show on ``stream`` (default: standard error) when nobody chose.

    True only for a TTY outside CI.
    """
    stream = sys.stderr if stream is None else stream
    if stream is None or in_ci():
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def bar(iterable: Iterable[Any] | None = None, *, total: int | None = None, desc: str | None = None,
        enabled: bool | None = None, **options: Any) -> tqdm:
    """A tqdm progress bar over ``iterable`` on standard error, shown or disabled.

    Parameters
    ----------
    iterable : what to iterate over; None for a bar advanced by ``update``.
    total : number of expected iterations (default: ``len(iterable)`` where it has one).
    desc : the label in front of the bar.
    enabled : True shows the bar, False hides it, None (auto) shows it only when standard
        error is a TTY and ``CI`` is not set (:func:`interactive`).
    **options : further tqdm options (``unit``, ``initial``, ``leave``, ...).

    Returns
    -------
    tqdm
        Iterable, and usable as a context manager; a disabled bar writes nothing.
    """
    show = interactive() if enabled is None else bool(enabled)
    options = {"file": sys.stderr, "dynamic_ncols": True, **options}
    return tqdm(iterable, total=total, desc=desc, disable=not show, **options)


__all__ = ["bar", "in_ci", "interactive"]
