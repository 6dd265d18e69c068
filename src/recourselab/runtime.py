"""Runtime controls of a computation: seeded torch, thread limits and device choice.

The library and the pipeline both use these, so that the same seed gives the same weights
under every task runner.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def pick_device(slot: int = 0, n_gpus: int | None = None) -> str:
    """``cuda:<slot mod n_gpus>`` when CUDA is available, else ``cpu`` (round-robin per seed).

    ``n_gpus`` overrides the count torch reports (0: CPU).
    """
    if n_gpus is None:
        import torch

        n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return f"cuda:{slot % n_gpus}" if n_gpus > 0 else "cpu"


@dataclass(frozen=True)
class DeviceSlot:
    """A device held by one task: ``name`` is the machine's device (recorded in provenance),
    ``torch_device`` what the task passes to torch (``cuda:0`` in a process pinned to one GPU)."""

    name: str
    torch_device: str


#: The GPU this worker process is pinned to (``CUDA_VISIBLE_DEVICES``), once it ran a GPU task.
_PINNED: str | None = None


def _in_worker_process() -> bool:
    """True in a task runner's worker process (process pool, Dask nanny), not in the stage's own process."""
    import multiprocessing

    return multiprocessing.parent_process() is not None


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


@contextmanager
def device_slot(device: str, lock_dir: str | Path, *, isolate: bool | None = None,
                poll_s: float = 0.2) -> Iterator[DeviceSlot]:
    """Hold ``device`` for the block: one task per GPU at a time, across threads and processes.

    Parameters
    ----------
    device : ``cpu`` (no slot: yields at once) or ``cuda:<i>`` (its round-robin assignment).
    lock_dir : folder of the slot files (``<lock_dir>/cuda-<i>.lock``), shared by every worker of a machine.
    isolate : pin this process to its first GPU (``CUDA_VISIBLE_DEVICES``) so that its tasks see that
        device only, as ``cuda:0``; later tasks of the process use and hold that GPU. Default: in a
        worker process whose CUDA is not initialised yet, or one already pinned.
    poll_s : seconds between tries while another task holds the GPU.

    The slot is an exclusive ``flock`` on the device's file: released when the block exits, and by
    the operating system when its process dies.
    """
    global _PINNED
    if not device.startswith("cuda"):
        yield DeviceSlot(device, device)
        return
    if isolate is None:
        isolate = _PINNED is not None or (_in_worker_process() and not _cuda_initialized())
    torch_device = device
    if isolate:
        if _PINNED is None:
            _PINNED = device
            os.environ["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1] if ":" in device else "0"
        device, torch_device = _PINNED, "cuda:0"
    import fcntl

    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{device.replace(':', '-')}.lock", "a+b") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(poll_s)
        try:
            yield DeviceSlot(device, torch_device)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
