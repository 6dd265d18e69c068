"""DensityFlow's per-seed work on a GPU: placement through the GPU slots, and wall time against the CPU.

Runs the library alone (no Prefect, no DVC), so that it needs only torch, torchdiffeq, pandas,
scikit-learn, pyarrow and pydantic on the GPU machine, and the prepare stage's outputs
(``data/prepared/<dataset>/seed=<k>``). Every fit uses the default profile's ``train_flow``
settings of params.yaml. Measures, in this order (the JSON file is rewritten after each step, so a run
cut short keeps what it measured):

- placement: one fit per seed of ``--placement-dataset`` in its own thread, each holding
  :func:`recourselab.runtime.device_slot` of :func:`~recourselab.runtime.pick_device` (its seed): the
  busy spans per device (at most one task per GPU at a time) and the device each fit ran on;
- seconds per training step on the CPU (1 thread: one task's share of a 2-core machine with 2 workers;
  and all threads) and on the GPU, from short fits (``--probe-epochs``) of every dataset;
- the full default fit (seed 0) of each dataset on the GPU, then generation for the first
  ``generate.max_queries`` test rows (target: the other class) on the GPU, while ``--budget-s`` lasts.

``--tabnet DATASET`` instead times TabNet epochs (the ensemble member's fixed settings) on the CPU and the GPU.
Writes ``$OUT/gpu.json`` where ``OUT`` is set, else bench/results/gpu.json, and logs the ratios.
Run: ``PYTHONPATH=src:. python bench/gpu.py [--budget-s S] [--datasets a,b] [--tabnet DATASET]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

from recourselab.config import load_params
from recourselab.data import load_prepared
from recourselab.densityflow import DensityFlow
from recourselab.densityflow.config import settings_of
from recourselab.runtime import device_slot, limit_threads, pick_device

log = logging.getLogger("bench.gpu")
OUT = Path(os.environ["OUT"]) / "gpu.json" if os.environ.get("OUT") else Path(__file__).parent / "results" / "gpu.json"
#: Datasets in the order their full GPU fits run: the ones whose CPU fits dominate the profile last.
DATASETS = ("german", "moons", "circles", "compas", "adult", "chessboard", "spirals")


def _targets(gpu: str) -> tuple[tuple[str, str, int], ...]:
    """(label, device, CPU threads) of each compared target: one CPU thread, every CPU thread, ``gpu``."""
    return ("cpu_1_thread", "cpu", 1), ("cpu_all_threads", "cpu", os.cpu_count()), ("gpu", gpu, 1)


def _fit(prepared, name: str, seed: int, params, device: str,  # noqa: ANN001
         **overrides) -> tuple[DensityFlow, dict]:
    """Fit DensityFlow on ``prepared`` (seed ``seed`` of ``name``; its default train_flow settings,
    ``overrides`` on top) on ``device``."""
    X, y = prepared.arrays("train")
    section = params.train_flow.for_dataset(name).model_dump(mode="json") | overrides
    flow = DensityFlow(schema=prepared.schema, **settings_of("train_flow", section), seed=seed, device=device)
    start = time.perf_counter()
    flow.fit(X, y, progress=False)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    n_rows = min(len(y), section["max_train_rows"] or len(y))
    epochs = len(flow.log_.rows)
    steps = epochs * -(-n_rows // section["batch_size"])
    return flow, {"fit_s": seconds, "epochs": epochs, "steps": steps, "s_per_step": seconds / steps,
                  "final_loss": float(flow.log_.rows[-1]["loss"]) if flow.log_.rows else None}


def placement(name: str, params, seeds: list[int], **overrides) -> dict:  # noqa: ANN001
    """One fit per seed, each in its own thread holding its device's slot: spans and devices."""
    spans: list[dict] = []
    lock_dir = Path(tempfile.mkdtemp(prefix="gpu-slots-"))

    def task(seed: int) -> None:
        wanted = pick_device(seed)
        with limit_threads(1), device_slot(wanted, lock_dir, isolate=False) as slot:
            start = time.monotonic()
            prepared = load_prepared(f"data/prepared/{name}/seed={seed}")
            _, info = _fit(prepared, name, seed, params, slot.torch_device, **overrides)
            spans.append({"seed": seed, "device": slot.name, "start": start, "end": time.monotonic(), **info})

    t0 = time.monotonic()
    threads = [threading.Thread(target=task, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    overlap = max(sum(o["device"] == s["device"] and o["start"] < s["end"] and s["start"] < o["end"] for o in spans)
                  for s in spans)
    for s in spans:
        s["start"], s["end"] = s["start"] - t0, s["end"] - t0
    return {"dataset": name, "wall_s": wall, "max_tasks_on_one_device_at_once": overlap,
            "spans": sorted(spans, key=lambda s: s["start"])}


def tabnet_epoch_seconds(name: str, params, device: str, epochs: int) -> dict:  # noqa: ANN001
    """Seconds per epoch of TabNet (the ``tune_ensemble`` member's fixed settings) on ``name``'s training rows.

    Early stopping is off (``patience`` 0), so every run trains ``epochs`` epochs.
    """
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from pytorch_tabnet.tab_model import TabNetClassifier

    prepared = load_prepared(f"data/prepared/{name}/seed=0")
    X, y = prepared.arrays("train")
    Xv, yv = prepared.arrays("val")
    fixed = dict(params.models.tabnet.fixed)
    est = TabNetClassifier(seed=0, verbose=0, mask_type=fixed.get("mask_type", "sparsemax"),
                           optimizer_fn=torch.optim.Adam, optimizer_params={"lr": fixed.get("lr", 0.02)},
                           device_name=device)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X.astype(np.float32), y, eval_set=[(Xv.astype(np.float32), yv)], eval_metric=["logloss"],
                max_epochs=epochs, patience=0, batch_size=1024, virtual_batch_size=128, compute_importance=False)
    seconds = time.perf_counter() - start
    return {"rows": int(len(y)), "epochs": epochs, "s_per_epoch": seconds / epochs,
            "val_accuracy": float((est.predict(Xv.astype(np.float32)) == yv).mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting full GPU fits after this many seconds")
    ap.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated datasets, in run order")
    ap.add_argument("--placement-dataset", default="german")
    ap.add_argument("--probe-epochs", type=int, default=2, help="epochs of the short fits that time a step")
    ap.add_argument("--epochs", type=int, default=None, help="override train_flow epochs of the placement and full "
                    "fits (a smoke run; min_steps is then 0)")
    ap.add_argument("--tabnet", default=None, metavar="DATASET",
                    help="instead: seconds per TabNet epoch on DATASET, 1 CPU thread, all threads and the GPU")
    ap.add_argument("--tabnet-epochs", type=int, default=10)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    start = time.perf_counter()
    params = load_params()
    short = {} if args.epochs is None else {"epochs": args.epochs, "min_steps": 0}
    cuda = torch.cuda.is_available()
    gpu = "cuda:0" if cuda else "cpu"
    result: dict = {"cuda": cuda, "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
                    "torch": torch.__version__, "cpu_count": os.cpu_count(), "epochs_override": args.epochs,
                    "probe": {}, "full": {}}

    def save() -> None:
        result["elapsed_s"] = time.perf_counter() - start
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(result, indent=2) + "\n")

    if args.tabnet:
        result["tabnet"] = {"dataset": args.tabnet}
        for label, device, threads in _targets(gpu):
            with limit_threads(threads):
                tabnet_epoch_seconds(args.tabnet, params, device, 1)  # warm-up: imports, CUDA context
                result["tabnet"][label] = tabnet_epoch_seconds(args.tabnet, params, device, args.tabnet_epochs)
            log.info("TabNet on %s, %s: %.2f s per epoch", args.tabnet, label,
                     result["tabnet"][label]["s_per_epoch"])
            save()
        return

    result["placement"] = placement(args.placement_dataset, params, params.seeds, **short)
    log.info("placement: %d seeds in %.1f s, at most %d task(s) on one device at once",
             len(result["placement"]["spans"]), result["placement"]["wall_s"],
             result["placement"]["max_tasks_on_one_device_at_once"])
    save()
    names = [n for n in args.datasets.split(",") if n]
    prepared = {name: load_prepared(f"data/prepared/{name}/seed=0") for name in names}
    for name in names:
        probe = {}
        for label, device, threads in _targets(gpu):
            with limit_threads(threads):
                probe[label] = _fit(prepared[name], name, 0, params, device, epochs=args.probe_epochs, min_steps=0,
                                    warmup_epochs=0)[1]
        probe["cpu_1_thread_over_gpu"] = probe["cpu_1_thread"]["s_per_step"] / probe["gpu"]["s_per_step"]
        probe["cpu_all_threads_over_gpu"] = probe["cpu_all_threads"]["s_per_step"] / probe["gpu"]["s_per_step"]
        result["probe"][name] = probe
        log.info("%s: %.2f ms/step on 1 CPU thread, %.2f on %d, %.2f on %s", name,
                 1e3 * probe["cpu_1_thread"]["s_per_step"], 1e3 * probe["cpu_all_threads"]["s_per_step"],
                 os.cpu_count(), 1e3 * probe["gpu"]["s_per_step"], gpu)
        save()
    for name in names:
        if time.perf_counter() - start > args.budget_s:
            log.info("budget spent: no full fit of %s", name)
            continue
        flow, info = _fit(prepared[name], name, 0, params, gpu, **short)
        Xte, yte = prepared[name].arrays("test")
        rows = np.arange(min(len(yte), params.generate.max_queries))
        flow.with_settings(n_starts=params.generate.n_starts, jitter=params.generate.jitter)
        t0 = time.perf_counter()
        res = flow.generate(Xte[rows], target=(yte[rows] + 1) % prepared[name].schema.n_classes)
        info |= {"generate_s": time.perf_counter() - t0, "generate_rows": int(len(rows)),
                 "cost_l2": float(res.cost_l2.mean()), "device": gpu}
        result["full"][name] = info
        log.info("%s on %s: fit %.1f s (%d steps), generate %.1f s", name, gpu, info["fit_s"], info["steps"],
                 info["generate_s"])
        save()
    save()


if __name__ == "__main__":
    main()
