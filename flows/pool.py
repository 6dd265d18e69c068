"""One pool of a stage's per-seed tasks across datasets, run before DVC runs that stage.

DVC runs one stage per dataset at a time, so each stage's 3 seeds on 2 workers leave one worker
idle for the last seed, and each stage run starts its own worker processes. ``recourselab repro``
(with ``orchestration.pool``) therefore runs, before each stage of :data:`POOLED`, that stage's
tasks of every dataset DVC will rerun in one flow with ``orchestration.max_workers`` workers, the
datasets with the most work first. The tasks land in the task cache (``orchestration.cache_dir``)
under the keys the stage computes, so the stage that DVC runs next finds cache hits and only
publishes: its outputs and DVC's record are the ones the stage alone would make.

Run (in the project root): ``python -m flows.pool STAGE DATASET [DATASET ...] [--params params.yaml]``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow

from recourselab.config import Params
from recourselab.errors import ConfigError, RecourselabError
from recourselab.orchestration import task_runner, warm_tasks, worker_logging

log = logging.getLogger("recourselab.pool")

Calls = Callable[[Params, str, dict[str, Path], Path], tuple[list[dict[str, Any]], list[str]]]

PREPARED = {"prepared": "data/prepared"}
UPSTREAM = {**PREPARED, "ensemble": "data/ensemble"}


@dataclass(frozen=True)
class Pooled:
    """A stage whose tasks can run in one pool across datasets.

    Attributes
    ----------
    module : the flow module with the task and its calls builder.
    task, calls : names of the Prefect task and of ``calls(params, dataset, roots, cache_root) -> (calls, keys)``.
    roots : upstream folder of each root the calls read (the stage script's default paths).
    weight : (params, dataset) -> how long its tasks run, relative (largest first); None: the ``datasets`` order.
    """

    module: str
    task: str
    calls: str
    roots: dict[str, str]
    weight: Callable[[Params, str], float] | None = None

    def load(self) -> tuple[Any, Calls]:
        import importlib

        mod = importlib.import_module(self.module)
        return getattr(mod, self.task), getattr(mod, self.calls)


def train_rows(params: Params, dataset: str) -> float:
    """Rows of the dataset's prepared training split (first seed); 0 when it cannot be read."""
    import pyarrow.parquet as pq

    try:
        return float(pq.ParquetFile(Path(PREPARED["prepared"]) / dataset / f"seed={params.seeds[0]}" /
                                    "train.parquet").metadata.num_rows)
    except (OSError, ValueError):
        return 0.0


def training_steps(params: Params, dataset: str) -> float:
    """Optimizer steps of the dataset's DensityFlow fit: its epochs (at least ``min_steps`` steps) times
    its batches per epoch."""
    settings = params.train_flow.for_dataset(dataset)
    rows = min(train_rows(params, dataset), settings.max_train_rows or math.inf)
    batches = max(math.ceil(rows / settings.batch_size), 1)
    return float(max(settings.epochs, math.ceil(settings.min_steps / batches)) * batches)


#: The pooled stages, in DVC's order.
POOLED: dict[str, Pooled] = {
    "tune_ensemble": Pooled("flows.tune_ensemble", "tune_ensemble", "tune_ensemble_calls", PREPARED, train_rows),
    "train_flow": Pooled("flows.densityflow", "train_flow", "train_flow_calls", UPSTREAM, training_steps),
    "distill": Pooled("flows.densityflow", "distill", "distill_calls", {**UPSTREAM, "flow": "data/densityflow"},
                      train_rows),
    "generate": Pooled("flows.densityflow", "generate", "generate_calls", {**UPSTREAM, "flow": "data/distill"},
                       train_rows),
    "ablate": Pooled("flows.ablate", "ablate", "ablate_calls",
                     {**UPSTREAM, "flow": "data/densityflow", "recourse": "data/recourse"}, train_rows),
    "discover": Pooled("flows.discover", "discover", "discover_calls", UPSTREAM, train_rows),
    "evaluate": Pooled("flows.evaluate", "evaluate", "evaluate_calls", {**UPSTREAM, "flow": "data/distill"},
                       train_rows),
}


def pooled(stage: str) -> Pooled:
    """The :data:`POOLED` entry of ``stage``; an unknown name is an error that lists the valid ones."""
    if stage not in POOLED:
        raise ConfigError(f"stage {stage!r} has no pool; pooled stages: {', '.join(POOLED)}")
    return POOLED[stage]


@flow(name="pool", validate_parameters=False)
def pool_flow(stage: str, datasets: list[str], params: Params, cache_root: Path) -> dict[str, list[tuple[str, Any]]]:
    """Run ``stage``'s tasks of every dataset of ``datasets`` into the task cache, the most work first.

    Runs in the project root (the upstream folders are relative to it, as in the stages). Returns,
    per dataset that has tasks, (final state name, error or None) of each of them.
    """
    spec = pooled(stage)
    task, build = spec.load()
    roots = {name: Path(folder) for name, folder in spec.roots.items()}  # relative, as the stage scripts name them
    order = [d for d in params.datasets if d in datasets]  # the pipeline's order, then the heaviest first
    order = sorted(order, key=lambda d: -spec.weight(params, d)) if spec.weight else order
    calls, keys, owner = [], [], []
    for dataset in order:
        c, k = build(params, dataset, roots, cache_root)
        calls += c
        keys += k
        owner += [dataset] * len(c)
    log.info("pool %s: %d tasks of %s on %d workers", stage, len(calls), ", ".join(dict.fromkeys(owner)) or "-",
             params.orchestration.max_workers)
    outcomes: dict[str, list[tuple[str, Any]]] = {d: [] for d in dict.fromkeys(owner)}  # datasets with tasks
    done = warm_tasks(task, calls, Path(cache_root) / "results", keys) if calls else []
    for dataset, (key, state, error) in zip(owner, done, strict=True):
        outcomes[dataset].append((state, error))
        if error is not None:
            log.warning("pool %s: %s failed (%s); its stage runs it again", stage, key, error)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    """Warm ``STAGE``'s tasks of the given datasets; each dataset's outcome goes to the run log. Returns 0
    also when tasks failed (their stage reports them), 1 when the pool could not start."""
    from recourselab.pipeline.stage import cache_root
    from recourselab.pipeline.summary import RUN_LOG_ENV, append_stage_run
    from recourselab.pipeline.validate import load_checked_params

    ap = argparse.ArgumentParser(prog="python -m flows.pool", description=__doc__.split("\n\n")[0])
    ap.add_argument("stage", choices=list(POOLED))
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    args = ap.parse_args(argv)
    worker_logging(logging.INFO)
    start = time.monotonic()
    try:
        params = load_checked_params(args.params)
        unknown = [d for d in args.datasets if d not in params.datasets]
        if unknown:
            raise ConfigError(f"datasets {unknown} are not in params.yaml `datasets` {params.datasets}")
        outcomes = pool_flow.with_options(task_runner=task_runner(params.orchestration))(
            stage=args.stage, datasets=args.datasets, params=params, cache_root=cache_root(params, args.params))
    except RecourselabError as err:  # e.g. an upstream output missing: the stage itself will say so
        log.error("pool %s: %s; the stage runs its tasks itself", args.stage, err)
        return 1
    wall = time.monotonic() - start
    if os.environ.get(RUN_LOG_ENV):
        for dataset, done in outcomes.items():
            append_stage_run(os.environ[RUN_LOG_ENV], {
                "stage": args.stage, "dataset": dataset, "pool": True, "wall_s": wall,
                "status": "ok" if all(error is None for _, error in done) else "failed",
                "tasks": len(done), "cache_hits": sum(state == "Cached" for state, _ in done)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
