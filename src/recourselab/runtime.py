"""Runtime controls of a computation: seeded torch, thread limits and device choice.

The library and the pipeline both use these, so that the same seed gives the same weights
under every task runner.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def pick_device(slot: int = 0) -> str:
    """``cuda:<slot mod n_gpus>`` when CUDA is available, else ``cpu`` (round-robin per seed)."""
    import torch

    if torch.cuda.is_available():
        return f"cuda:{slot % torch.cuda.device_count()}"
    return "cpu"


def threads_per_task(orchestration: Any) -> int:
    """CPU threads of one task: ``orchestration.threads_per_task``, or (None) the CPUs this process
    may use divided by ``orchestration.max_workers``, so that concurrent tasks do not oversubscribe."""
    if orchestration.threads_per_task is not None:
        return int(orchestration.threads_per_task)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, usable // orchestration.max_workers)


_TORCH_RNG_LOCK = threading.RLock()


@contextmanager
def torch_seeded(seed: int) -> Iterator[None]:
    """Seed torch's global random generator and hold it for the block.

    Layer initialisation and TabNet's training draw from that one generator; with the
    ``thread`` task runner two tasks would interleave their draws, so the same seed would give
    other weights. Blocks run one at a time (per process), each from its own seed.
    """
    import torch

    with _TORCH_RNG_LOCK:
        torch.manual_seed(seed)
        yield


@contextmanager
def limit_threads(n_threads: int) -> Iterator[None]:
    """Cap BLAS/OpenMP (threadpoolctl) and torch intra-op threads at ``n_threads`` for a task.

    torch's and OpenMP's limits belong to the calling thread, so tasks of the ``thread`` runner
    each cap (and restore) their own pool thread.
    """
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(n_threads)
    try:
        with threadpool_limits(limits=n_threads):
            yield
    finally:
        torch.set_num_threads(before)
