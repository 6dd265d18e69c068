"""Benchmark of the orchestration: per-seed parallelism, Prefect overhead, resume after a kill, disk copies.

Measures, on moons with one local Prefect server for every run (as `recourselab repro` does):
- ``train_flow`` of 4 seeds with the process runner and 1 vs 2 workers (speedup);
- Prefect's overhead per task (``run_tasks`` of trivial tasks against calling them directly);
- resume after a kill: a 4-seed ``train_flow`` run SIGKILLed once its first seed's result is stored,
  then rerun (finished seeds are cache hits) against a fresh run;
- disk use of the staging store and the published outputs (bytes, and unique bytes by inode);
- the machine's parallel capacity: fixed single-threaded workloads (torch MLP steps, a pure Python
  loop, a bare DensityFlow fit) in 1 process, then in 2 processes at once; throughput of 2 over 1
  bounds any 2-worker speedup.

Writes bench/results/orchestration.json and prints the ratios.
Run: ``PYTHONPATH=. python bench/orchestration.py [--epochs N] [--capacity-only | --speedup-only | --resume-only]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

log = logging.getLogger("bench.orchestration")
OUT = Path(__file__).parent / "results" / "orchestration.json"
SEEDS = [0, 1, 2, 3]


def make_params(workers: int, epochs: int, runner: str = "process") -> Any:
    from recourselab.config import Params, parse_params

    raw = Params().model_dump(mode="json")
    raw.update(datasets=["moons"], seeds=SEEDS)
    raw["train_flow"].update(epochs=epochs)
    raw["orchestration"].update(task_runner=runner, max_workers=workers, threads_per_task=1)
    return parse_params(raw)


class TrainRun(NamedTuple):
    """One timed 4-seed train_flow: wall seconds, each seed's cache hit, and each seed's own timings
    (its ``train_flow.json``: fit and whole task, inside the worker; none for a cache hit)."""

    seconds: float
    cached: list[bool]
    task_times: list[dict]


def train(tmp: Path, workers: int, epochs: int) -> TrainRun:
    """A 4-seed train_flow in ``tmp`` (prepared first, untimed)."""
    import flows.densityflow as df
    from flows.prepare import run_prepare

    params = make_params(workers, epochs)
    if not (tmp / "prepared" / "moons").is_dir():
        run_prepare("moons", make_params(1, epochs, "thread"), tmp / "prepared", tmp / "cache")
    start = time.perf_counter()
    results = df.run(df.training_flow, params, dataset="moons", prepared_root=tmp / "prepared",
                     ensemble_root=tmp / "ensemble", out_root=tmp / "densityflow", cache_root=tmp / "cache")
    seconds = time.perf_counter() - start
    times = [json.loads((Path(r.out_dir) / "train_flow.json").read_text()) for r in results if not r.cached]
    log.info("%d worker(s): %.1f s wall; per seed, fit %s s, whole task %s s", workers, seconds,
             [round(t["fit_time_s"], 1) for t in times], [round(t["train_flow_time_s"], 1) for t in times])
    return TrainRun(seconds, [r.cached for r in results], times)


def save(entries: dict[str, Any], *, merge: bool = True) -> dict[str, Any]:
    """Write ``entries`` to :data:`OUT`, on top of what it holds (``merge``) or alone; return the whole."""
    result = {**(json.loads(OUT.read_text()) if merge and OUT.is_file() else {}), **entries}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    return result


#: Single-threaded workloads of :func:`capacity`: small-MLP training steps, a Python loop, and a DensityFlow fit
#: (moons-sized, no Prefect): what a ``train_flow`` task computes, without the orchestration around it.
WORKLOADS = {
    "torch_mlp": "import torch\ntorch.set_num_threads(1)\ntorch.manual_seed(0)\n"
                 "net = torch.nn.Sequential(torch.nn.Linear(8, 128), torch.nn.Tanh(), torch.nn.Linear(128, 128), "
                 "torch.nn.Tanh(), torch.nn.Linear(128, 8))\nopt = torch.optim.Adam(net.parameters())\n"
                 "x = torch.randn(256, 8)\nfor _ in range(3000):\n    opt.zero_grad()\n"
                 "    net(x).pow(2).mean().backward()\n    opt.step()\n",
    "python_loop": "s = 0\nfor i in range(30_000_000):\n    s += i * i % 7\n",
    "densityflow_fit": "import torch\ntorch.set_num_threads(1)\nfrom sklearn.datasets import make_moons\n"
                       "from recourselab.densityflow import DensityFlow\n"
                       "X, y = make_moons(1800, noise=0.1, random_state=0)\n"
                       "DensityFlow(epochs=8, seed=0).fit(X, y, progress=False)\n",
}


def _workload(name: str, n: int) -> float:
    """Seconds of ``n`` processes running workload ``name`` at once."""
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", WORKLOADS[name]]) for _ in range(n)]
    if any(p.wait() for p in procs):
        raise RuntimeError(f"capacity workload {name} failed")
    return time.perf_counter() - start


def capacity() -> dict[str, dict[str, float]]:
    """Seconds of each of :data:`WORKLOADS` in one process alone and in two processes started together, and the
    throughput ratio ``2 * alone / together`` (2.0: two full cores; 1.0: no gain from a second worker)."""
    out = {}
    for name in WORKLOADS:
        alone, together = _workload(name, 1), _workload(name, 2)
        out[name] = {"one_process_s": alone, "two_processes_s": together, "throughput_2_over_1": 2 * alone / together}
        log.info("capacity %s: %.1f s alone, %.1f s two at once: %.2fx throughput", name, alone, together,
                 out[name]["throughput_2_over_1"])
    return out


def _trivial(*, seed: int, staging_root: str) -> dict:
    from recourselab.orchestration import stage_artifacts

    return stage_artifacts(f"{staging_root}/seed={seed}", {"a.txt": lambda p: p.write_text(str(seed))})


def overhead(tmp: Path, n: int = 16) -> dict[str, float]:
    """Seconds per task of ``run_tasks`` (thread runner, 1 worker) minus the task's own time."""
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE
    from prefect.task_runners import ThreadPoolTaskRunner

    from recourselab.orchestration import run_tasks

    start = time.perf_counter()
    for s in range(n):
        _trivial(seed=s, staging_root=str(tmp / "direct"))
    direct = (time.perf_counter() - start) / n
    seed_task = task(_trivial, name="trivial", cache_policy=NO_CACHE)

    @flow(name="overhead", task_runner=ThreadPoolTaskRunner(max_workers=1))
    def run() -> None:
        run_tasks(seed_task, [dict(seed=s, staging_root=str(tmp / "staged")) for s in range(n)],
                  [tmp / "out" / str(s) for s in range(n)], tmp / "results")

    run()  # warm: the flow's first run in this process
    start = time.perf_counter()
    run()
    per_task = (time.perf_counter() - start) / n
    return {"tasks": n, "direct_s_per_task": direct, "prefect_s_per_task": per_task,
            "overhead_s_per_task": per_task - direct}


def resume(tmp: Path, epochs: int, env: dict[str, str]) -> dict[str, Any]:
    """Kill a 1-worker 4-seed train_flow once one seed's result is stored; rerun it; time both."""
    from flows.prepare import run_prepare

    cmd = [sys.executable, __file__, "--train-only", str(tmp), "--epochs", str(epochs)]
    results = tmp / "cache" / "results"
    run_prepare("moons", make_params(1, epochs, "thread"), tmp / "prepared", tmp / "cache")
    before = set(results.iterdir())  # prepare's results: the kill waits for a train_flow one
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while not set(results.iterdir()) - before:
        if proc.poll() is not None:
            raise RuntimeError(f"the run to kill ended first (status {proc.returncode})")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_after = time.perf_counter() - start
    run = train(tmp, 1, epochs)
    return {"killed_after_s": killed_after, "resume_s": run.seconds, "cache_hits_on_resume": sum(run.cached)}


def disk(*roots: Path) -> dict[str, int]:
    """Bytes of the files under ``roots`` and unique bytes (each inode counted once)."""
    total, inodes = 0, {}
    for root in roots:
        for p in root.rglob("*"):
            if p.is_file():
                st = p.stat()
                total += st.st_size
                inodes[(st.st_dev, st.st_ino)] = st.st_size
    return {"bytes": total, "unique_bytes": sum(inodes.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=60,
                    help="train_flow epochs per seed (60: the default profile's)")
    ap.add_argument("--capacity-only", action="store_true", help="measure only the machine's parallel capacity; "
                    "update that entry of the JSON file")
    ap.add_argument("--train-only", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--speedup-only", action="store_true", help="measure only the 1- and 2-worker runs; update "
                    "that entry of the JSON file")
    ap.add_argument("--resume-only", action="store_true", help="measure only a fresh 1-worker run and the resume; "
                    "update those entries of the JSON file")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.train_only is not None:  # the run that resume() kills
        train(args.train_only, 1, args.epochs)
        return
    if args.capacity_only:
        load = os.getloadavg()[0]
        result = save({"capacity": capacity(), "capacity_load_average_1min_at_start": load})
        print("; ".join(f"{k}: {v['throughput_2_over_1']:.2f}x" for k, v in result["capacity"].items()))
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from recourselab.prefect_server import local_server

    result: dict[str, Any] = {"epochs": args.epochs, "seeds": SEEDS, "cpus": len(os.sched_getaffinity(0)),
                              "load_average_1min_at_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="bench-orchestration-") as tmp_name, \
            local_server(env={"PREFECT_HOME": str(Path(tmp_name) / "prefect")}) as url, \
            temporary_settings(updates={PREFECT_API_URL: url}):
        os.environ["PREFECT_API_URL"] = url  # worker processes share the server
        tmp = Path(tmp_name)
        if args.speedup_only:
            load = os.getloadavg()[0]
            runs = {w: train(tmp / f"workers{w}", w, args.epochs) for w in (1, 2)}
            speedup = runs[1].seconds / runs[2].seconds
            save({"speedup": {"epochs": args.epochs, "one_worker_s": runs[1].seconds,
                              "two_workers_s": runs[2].seconds, "speedup_2_over_1": speedup,
                              "load_average_1min_at_start": load,
                              "task_times": {str(w): r.task_times for w, r in runs.items()}}})
            print(f"2 workers over 1 ({args.epochs} epochs): {speedup:.2f}x")
            return
        if args.resume_only:
            seconds = train(tmp / "fresh", 1, args.epochs).seconds
            result = save({"resume": {**resume(tmp / "resume", args.epochs, dict(os.environ)),
                                      "fresh_1_worker_s": seconds, "load_average_1min": os.getloadavg()[0]}})
            print(f"resume {result['resume']['resume_s']:.1f} s ({result['resume']['cache_hits_on_resume']} cache "
                  f"hits) vs {seconds:.1f} s fresh")
            return
        result["capacity"] = capacity()
        result["overhead"] = overhead(tmp / "overhead")
        log.info("Prefect overhead per task: %.3f s", result["overhead"]["overhead_s_per_task"])
        task_times = {}
        for workers in (1, 2):
            run = train(tmp / f"workers{workers}", workers, args.epochs)
            assert not any(run.cached)
            result[f"train_flow_{workers}_workers_s"] = run.seconds
            task_times[str(workers)] = run.task_times
            log.info("train_flow, 4 seeds, %d worker(s): %.1f s", workers, run.seconds)
        result["speedup_2_over_1"] = result["train_flow_1_workers_s"] / result["train_flow_2_workers_s"]
        result["task_times"] = task_times
        result["resume"] = {**resume(tmp / "resume", args.epochs, dict(os.environ)),
                            "fresh_1_worker_s": result["train_flow_1_workers_s"]}
        log.info("resume after a kill: %.1f s (%d cache hits) vs %.1f s fresh", result["resume"]["resume_s"],
                 result["resume"]["cache_hits_on_resume"], result["train_flow_1_workers_s"])
        staged, published = tmp / "workers2" / "cache" / "artifacts", tmp / "workers2" / "densityflow"
        result["disk"] = {"staging": disk(staged), "published": disk(published), "both": disk(staged, published)}
        log.info("disk: staging + outputs %d bytes, %d unique", result["disk"]["both"]["bytes"],
                 result["disk"]["both"]["unique_bytes"])
    result["load_average_1min_at_end"] = os.getloadavg()[0]
    save(result, merge=False)
    print(f"2 workers over 1: {result['speedup_2_over_1']:.2f}x; Prefect overhead "
          f"{result['overhead']['overhead_s_per_task'] * 1000:.0f} ms/task; resume "
          f"{result['resume']['resume_s'] / result['train_flow_1_workers_s']:.2f} of a fresh run")


if __name__ == "__main__":
    main()
