"""Argument parsing and logging shared by the stage scripts."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from recourselab.config import Params, load_params
from recourselab.data.registry import BUILTIN_DATASETS
from recourselab.errors import ConfigError, RecourselabError, did_you_mean, quiet_known_tracebacks
from recourselab.orchestration import LOG_FORMAT

log = logging.getLogger("recourselab.stages")


def parser(step: str, doc: str) -> argparse.ArgumentParser:
    # no abbreviations: `recourselab <stage>` rewrites the relative paths of full option names only
    ap = argparse.ArgumentParser(prog=f"recourselab {step}", description=doc, allow_abbrev=False)
    ap.add_argument("--dataset", required=True, help="dataset name (from params.yaml `datasets`)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"), help="params file")
    ap.add_argument("--out", type=Path, default=None, help="output root (default: data/<stage folder>)")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return ap


def setup(args: argparse.Namespace) -> Params:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format=LOG_FORMAT)
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    quiet_known_tracebacks()  # bad input: one line from Prefect, the message again from `guarded`
    params = load_params(args.params)
    others = [n for n in [*BUILTIN_DATASETS, *params.data.custom] if n not in params.datasets]
    known = [*params.datasets, *others]
    if args.dataset not in known:  # a typo: name it before a stage looks for its upstream folders
        raise ConfigError(f"unknown dataset {args.dataset!r}{did_you_mean(args.dataset, known)}; "
                          f"params.yaml `datasets`: {', '.join(params.datasets)}; "
                          f"other built-in and custom datasets: {', '.join(others)}")
    return params


def cache_root(params: Params, params_file: Path) -> Path:
    root = params.orchestration.cache_dir.expanduser()  # like data.dir and data.cache_dir
    return root if root.is_absolute() else (params_file.resolve().parent / root)


def guarded(main):  # noqa: ANN001, ANN201 - decorator
    """Turn recourselab errors into a one-line message and exit status 1."""

    def wrapper(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except RecourselabError as err:
            log.error("%s", err)
            return 1

    wrapper.__doc__ = main.__doc__
    return wrapper
