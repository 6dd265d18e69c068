"""The ``recourselab`` command: one subcommand per pipeline stage, plus project helpers.

Stage subcommands run the same code as the DVC stage (``stages/<name>.py``) and must be
run inside a recourselab checkout (they write under ``data/``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from recourselab.errors import RecourselabError
from recourselab.pipeline.project import project_root

log = logging.getLogger(__name__)

STAGES: dict[str, str] = {
    "inputs": "copy and verify the raw files a dataset reads into data/inputs/<dataset>/ (DVC-tracked)",
    "prepare": "split, encode and write data/prepared/<dataset>/seed=<s>/",
    "tune_ensemble": "tune the model zoo per seed, write data/ensemble/<dataset>/seed=<s>/",
    "train_flow": "train DensityFlow per seed, write data/densityflow/<dataset>/seed=<s>/",
    "distill": "distill DensityFlow towards the ensemble under a query budget, write data/distill/...",
    "generate": "DensityFlow counterfactuals + robustness metrics, write data/recourse/... and data/metrics/...",
    "ablate": "DensityFlow without its density term / distillation, write data/ablate/<dataset>/...",
    "discover": "DISCOVER distributional counterfactuals per model and seed, write data/discover/<dataset>/<model>/...",
    "evaluate": "every recourse method on generate's query set, write data/evaluate/<dataset>/ (table, frontier)",
    "summary": "headline numbers (data/metrics/<dataset>/summary.json) and DVC plot tables (data/plots/<dataset>/)",
    "audit": "audit report (validity, cost, subgroups, certification, provenance), write data/reports/<dataset>/; "
             "`audit diff REV_A REV_B` compares two revisions",
}


#: Stage options that take a path: given relative, they are read from the caller's folder.
PATH_OPTIONS = ("--params", "--out", "--prepared", "--ensemble", "--flow", "--recourse", "--metrics", "--root",
                "--inputs", "--discover", "--evaluate")


def absolute_path_args(argv: list[str], cwd: Path) -> list[str]:
    """``argv`` with the relative values of :data:`PATH_OPTIONS` made absolute against ``cwd``."""
    out: list[str] = []
    takes_path = False
    for arg in argv:
        opt, eq, value = arg.partition("=")
        if takes_path:
            out.append(str(cwd / arg) if not Path(arg).is_absolute() else arg)
            takes_path = False
        elif opt in PATH_OPTIONS and eq:
            out.append(f"{opt}={cwd / value if not Path(value).is_absolute() else value}")
        else:
            out.append(arg)
            takes_path = arg in PATH_OPTIONS
    return out


def exit_status(code: int) -> int:
    """A child's return code as a shell exit status: killed by signal N (code -N) gives 128 + N."""
    return 128 - code if code < 0 else code


def run_stage(name: str, argv: list[str]) -> int:
    """Run stage ``name`` as DVC does, in a child interpreter started in the project root (its default
    paths are relative to it; ``python -m stages.<name>`` finds the checkout's ``stages`` and
    ``flows`` there); path options given relative to the caller's folder keep pointing there.

    Returns the stage's exit status (a Ctrl-C reaches the child too, which cleans up and exits).
    """
    root = project_root()
    argv = absolute_path_args(argv, Path.cwd())
    with subprocess.Popen([sys.executable, "-m", f"stages.{name}", *argv], cwd=root) as child:
        try:
            return exit_status(child.wait())
        except KeyboardInterrupt:
            return exit_status(child.wait())


def pipeline_env(root: Path) -> dict[str, str]:
    """Environment for DVC and the stages: this interpreter first on PATH and named in
    ``RECOURSELAB_PYTHON`` (which ``stages/run.sh`` prefers), quiet tools, and a Prefect home
    (default ``<root>/.recourselab/prefect``), created here: Prefect does not create missing
    parent folders, and its server then fails to open its database on a fresh checkout."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["RECOURSELAB_PYTHON"] = sys.executable  # stages/run.sh runs the stages with this interpreter
    env.setdefault("DVC_NO_ANALYTICS", "1")
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    env.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    env.setdefault("PREFECT_HOME", str(root / ".recourselab" / "prefect"))
    Path(env["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
    return env


#: ``dvc repro`` options under which no stage runs: no Prefect server is started for them.
NO_RUN_OPTIONS = frozenset({"-h", "--help", "--dry"})


def fetch_cache() -> Path | None:
    """``data.cache_dir`` of the project's params.yaml (relative: to the project root), or None
    (the default cache) outside a project or when params.yaml does not set it."""
    from recourselab.config import load_params

    try:
        root = project_root()
    except RecourselabError:
        return None
    if not (root / "params.yaml").is_file():
        return None
    configured = load_params(root / "params.yaml").data.cache_dir
    if configured is None:
        return None
    configured = configured.expanduser()
    return configured if configured.is_absolute() else root / configured


class Interrupted(BaseException):
    """SIGTERM or SIGINT (Ctrl-C) received by ``recourselab repro``: it stops its children and exits."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return signal.Signals(self.signum).name


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Turn the first SIGTERM or SIGINT into :class:`Interrupted` (later ones are ignored while the
    children are stopped); the previous handlers come back when the block exits."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _child(cmd: list[str], root: Path, env: dict[str, str], *, capture: bool = False) -> tuple[int, str]:
    """Run ``cmd`` in its own process group; on :class:`Interrupted` (or any error) stop the whole
    group (the signal first, SIGKILL after a grace period) before re-raising. Returns (status, stdout)."""
    from recourselab.prefect_server import stop_group

    proc = subprocess.Popen(cmd, cwd=root, env=env, start_new_session=True, text=True,
                            stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.DEVNULL if capture else None)
    try:
        out, _ = proc.communicate()
    except Interrupted as stop:
        stop_group(proc, first=stop.signum)
        raise
    except BaseException:
        stop_group(proc)
        raise
    return proc.returncode, out or ""


def stale_stages(dvc: list[str], root: Path, env: dict[str, str], *targets: str) -> set[str] | None:
    """Names (``stage@dataset``) of the stages ``dvc status`` reports changed (of ``targets`` and their
    upstream, when given); None if it failed."""
    import json

    code, out = _child([*dvc, "status", "--json", *targets], root, env, capture=True)
    try:
        status = json.loads(out) if code == 0 else None
    except ValueError:
        status = None
    return set(status) if isinstance(status, dict) else None


def pop_option(args: list[str], name: str) -> tuple[list[str], str | None]:
    """``args`` without ``name VALUE`` / ``name=VALUE``, and that value (None when absent)."""
    rest, value, i = [], None, 0
    while i < len(args):
        if args[i] == name:
            if i + 1 >= len(args):
                raise RecourselabError(f"{name} needs a value")
            value, i = args[i + 1], i + 2
            continue
        if args[i].startswith(name + "="):
            value = args[i].split("=", 1)[1]
        else:
            rest.append(args[i])
        i += 1
    return rest, value


def runs_a_stage(stale: set[str] | None) -> bool:
    """Whether ``dvc repro`` has work beyond the always-changed ``inputs`` stages (True when unknown)."""
    return stale is None or any(not name.startswith("inputs@") for name in stale)


#: The stages whose per-seed tasks ``recourselab repro`` runs in one pool across datasets (``flows.pool``).
POOLED_STAGES = ("tune_ensemble", "train_flow", "distill", "generate", "ablate", "discover", "evaluate")


def pooled_repro(dvc: list[str], root: Path, env: dict[str, str]) -> int:
    """``dvc repro`` in steps, so that each of :data:`POOLED_STAGES` first runs its tasks of every dataset in
    one pool (``orchestration.pool``); DVC then runs the stage on cache hits, with threads.

    The steps: ``dvc repro`` of the stages before the first pooled one; then, for each later stage of
    :data:`STAGES`, its pool when it has one (over the datasets whose stage ``dvc status`` reports
    changed) and ``dvc repro --single-item`` of it (its upstream is up to date by then); last a plain
    ``dvc repro`` if ``dvc status`` still lists a stage (one that is not in :data:`STAGES`). A failed pool
    is logged, and its stage runs those tasks itself and reports the failure. Returns the first
    non-zero DVC status, else 0.
    """
    from recourselab.orchestration import WARMED_ENV

    names = list(STAGES)
    first = min(names.index(stage) for stage in POOLED_STAGES)
    code, _ = _child([*dvc, "repro", *names[:first]], root, env)
    for stage in names[first:]:
        if code != 0:
            return code
        step_env = env
        if stage in POOLED_STAGES:
            changed = sorted({name.split("@", 1)[1] for name in stale_stages(dvc, root, env, stage) or ()
                              if name.startswith(f"{stage}@")})
            pooled, _ = _child([sys.executable, "-m", "flows.pool", stage, *changed], root, env) if changed else (0, "")
            if pooled == 0:
                step_env = {**env, WARMED_ENV: "1"}
        code, _ = _child([*dvc, "repro", "--single-item", stage], root, step_env)
    if code == 0 and runs_a_stage(stale_stages(dvc, root, env)):
        code, _ = _child([*dvc, "repro"], root, env)
    return code


def repro(dvc_args: list[str]) -> int:
    """``dvc repro`` after checking the project, with one local Prefect server for the run (none if
    nothing changed); then a summary per dataset. SIGTERM / Ctrl-C stop the server and DVC."""
    from recourselab.orchestration import DASK_ADDRESS_ENV
    from recourselab.pipeline.preflight import check_project, missing_notes
    from recourselab.pipeline.summary import RUN_LOG_ENV, new_run_log, read_run_log, render_summary
    from recourselab.prefect_server import local_server

    root = project_root()
    env = pipeline_env(root)
    dvc_args, address = pop_option(dvc_args, "--dask-address")
    if address:  # the stages run their per-seed tasks on this Dask scheduler
        env[DASK_ADDRESS_ENV] = address
    dvc = [sys.executable, "-m", "dvc"]
    if NO_RUN_OPTIONS.intersection(dvc_args):  # nothing runs: no checks, server or summary
        return exit_status(subprocess.call([*dvc, "repro", *dvc_args], cwd=root, env=env))
    os.chdir(root)  # relative data paths of params.yaml are read from the root, as the stages read them
    params = check_project(root)
    for level, note in missing_notes(root):
        log.log(level, "%s", note + (" (otherwise this run rebuilds them)" if level >= logging.WARNING else ""))
    # A caller that reads the records back (the scheduled flow) names the file; else a new one per run.
    run_log = Path(env.get(RUN_LOG_ENV) or new_run_log(root, str(os.getpid())))
    env[RUN_LOG_ENV] = str(run_log)
    start = time.monotonic()
    stale = None
    try:
        with _stop_on_signals():
            stale = stale_stages(dvc, root, env)
            pool = params.orchestration.pool and params.orchestration.max_workers > 1 and not dvc_args \
                and runs_a_stage(stale)

            def run(run_env: dict[str, str]) -> int:
                if pool:
                    return pooled_repro(dvc, root, run_env)
                return _child([*dvc, "repro", *dvc_args], root, run_env)[0]

            if "PREFECT_API_URL" in env or (stale == set() and not dvc_args):  # a server there, or nothing runs
                code = run(env)
            else:
                with local_server(env=env) as url:
                    code = run({**env, "PREFECT_API_URL": url})
    except Interrupted as stop:
        log.error("stopped by %s: the Prefect server and the DVC run were stopped; the outputs of the stages "
                  "that finished are kept", stop)
        return 128 + stop.signum
    sys.stdout.write("\n" + render_summary(root / "data" / "metrics", params.datasets, list(STAGES),
                                           read_run_log(run_log), stale=stale, run_ok=code == 0,
                                           wall_s=time.monotonic() - start))
    if code != 0:
        for level, note in missing_notes(root):
            if level >= logging.WARNING:
                log.error("%s", note)
    return exit_status(code)


def switch_profile(name: str, params_path: Path | None) -> int:
    """Write profile ``name`` to ``params_path`` (default: the project's params.yaml, from any subfolder).

    The file's ``data`` section and the custom datasets it lists are kept, and the file it
    replaces is first copied to a timestamped ``.bak`` next to it. A file that cannot be read is
    left alone (the error says so).
    """
    from recourselab.config import read_yaml, render_profile, write_params
    from recourselab.errors import ConfigError

    root = project_root()
    params_path = root / "params.yaml" if params_path is None else params_path
    if params_path.is_dir():
        raise ConfigError(f"--params {params_path} is a folder; give a file path")
    if not params_path.parent.is_dir():
        raise ConfigError(f"--params {params_path}: its folder {params_path.parent} does not exist")
    current = None
    if params_path.is_file():
        try:
            current = read_yaml(params_path)
        except ConfigError as err:
            raise ConfigError(f"{err}\n`recourselab profile` keeps the data section and custom datasets of "
                              f"{params_path}, so it does not replace a file it cannot read: fix it, or move it "
                              "away to write the profile from scratch") from None
    params = render_profile(name, root, current=current, current_source=str(params_path))
    backup = write_params(params_path, params)
    if params.data.custom:
        log.info("kept the data section of %s (custom datasets: %s; pipeline datasets: %s)", params_path,
                 ", ".join(params.data.custom), ", ".join(params.datasets))
    if backup is not None:
        log.info("the previous %s is saved as %s", params_path.name, backup)
    log.info("wrote profile %r to %s; `dvc repro` reruns exactly what changed", name, params_path)
    return 0


def serve(prefect_yaml: Path | None, names: list[str]) -> int:
    """Serve the deployments of the project's ``prefect.yaml`` (all, or those named) until stopped.

    Runs one flow run at a time (two profiles share one checkout). Needs a Prefect server:
    ``PREFECT_API_URL`` (``prefect server start``), else a clear error.
    """
    from prefect import serve as prefect_serve
    from prefect.flows import load_flow_from_entrypoint
    from prefect.settings import get_current_settings

    from recourselab.pipeline.scheduled import read_deployments, to_deployments

    root = project_root()
    if not get_current_settings().api.url:
        raise RecourselabError("no Prefect server to serve on: start one with `prefect server start` and set "
                               "PREFECT_API_URL (e.g. http://127.0.0.1:4200/api)")
    specs = read_deployments(prefect_yaml or root / "prefect.yaml")
    unknown = sorted(set(names) - {s.name for s in specs})
    if unknown:
        raise RecourselabError(f"unknown deployment(s) {', '.join(unknown)}; prefect.yaml declares "
                               f"{', '.join(s.name for s in specs)}")
    specs = [s for s in specs if not names or s.name in names]
    os.chdir(root)
    entrypoint = "flows/pipeline.py:pipeline"  # as prefect.yaml names it
    deployments = to_deployments({entrypoint: load_flow_from_entrypoint(entrypoint)}, specs)
    log.info("serving %s from %s", ", ".join(f"pipeline/{s.name}" for s in specs), root)
    prefect_serve(*deployments, limit=1)
    return 0


def list_datasets() -> int:
    from recourselab.data.registry import BUILTIN_DATASETS

    for spec in BUILTIN_DATASETS.values():
        sys.stdout.write(f"{spec.name:<11} {spec.source:<9} {spec.description}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="recourselab", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, helptext in STAGES.items():
        sp = sub.add_parser(name, help=f"stage: {helptext}", add_help=False)
        sp.add_argument("args", nargs=argparse.REMAINDER)
    sp = sub.add_parser("repro", help="dvc repro with a local Prefect server for the run", add_help=False)
    sp.add_argument("args", nargs=argparse.REMAINDER, help="extra arguments for dvc repro")
    sp = sub.add_parser("profile", help="write params.yaml from a profile (default, tiny, paper, ...)")
    sp.add_argument("name", nargs="?", help="profile name; omit to list them")
    sp.add_argument("--params", type=Path, default=None,
                    help="file to write (default: params.yaml at the project root)")
    sp = sub.add_parser("serve", help="serve the Prefect deployments of prefect.yaml (needs PREFECT_API_URL)")
    sp.add_argument("names", nargs="*", help="deployments to serve (default: all)")
    sp.add_argument("--prefect-yaml", type=Path, default=None, help="default: prefect.yaml of the project")
    sub.add_parser("fetch-data", help="download and verify the registry-shipped dataset files")
    sub.add_parser("datasets", help="list the built-in datasets")
    sp = sub.add_parser("explain", help="counterfactuals for new rows (CSV in original units) from trained artifacts")
    sp.add_argument("input", help="CSV file of rows in the dataset's original units, or - for standard input")
    sp.add_argument("--dataset", required=True, help="dataset whose artifacts explain the rows")
    sp.add_argument("--seed", type=int, default=0, help="seed of the artifacts (default 0)")
    sp.add_argument("--method", choices=("densityflow", "densityflow_r", "discover"), default="densityflow",
                    help="densityflow (default): the distilled flow; densityflow_r: RobustFlow, which repairs "
                         "counterfactuals some ensemble member rejects (more queries); discover: the rows as one "
                         "population")
    sp.add_argument("--model", default=None, help="DISCOVER's model (default: first of discover.models tuned)")
    sp.add_argument("--budget", type=int, default=None,
                    help="most ensemble rows queried in total (default: as many as the rows need)")
    sp.add_argument("--format", choices=("table", "json", "csv"), default=None,
                    help="output format (default: csv or json when --out ends in .csv or .json, else table)")
    sp.add_argument("--out", type=Path, default=None, help="write the output to this file (default, or -: stdout)")
    sp.add_argument("--params", type=Path, default=None, help="params file (default: params.yaml of the project)")
    sp.add_argument("--data-root", type=Path, default=None, help="artifact folder (default: data/ of the project)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # Stage and repro arguments belong to the stage script / dvc: pass them through untouched.
        if argv[:2] == ["audit", "diff"]:  # not the stage: compares two git revisions' outputs
            from recourselab.pipeline.audit_diff import run_command as audit_diff

            logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
            return audit_diff(argv[2:])
        if argv and argv[0] in STAGES:  # the stage sets up logging itself (-v: debug)
            return run_stage(argv[0], argv[1:])
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        if argv and argv[0] == "repro":
            return repro(argv[1:])
        args = build_parser().parse_args(argv)
        if args.command == "profile":
            if args.name is None:
                from recourselab.config import available_profiles

                sys.stdout.write("\n".join(available_profiles(project_root())) + "\n")
                return 0
            return switch_profile(args.name, args.params)
        if args.command == "fetch-data":
            from recourselab.data.sources import fetch_all

            for path in fetch_all(fetch_cache()):
                log.info("verified %s", path)
            return 0
        if args.command == "datasets":
            return list_datasets()
        if args.command == "serve":
            return serve(args.prefect_yaml, args.names)
        if args.command == "explain":
            from recourselab.pipeline.explain_output import run_command

            return run_command(args)
    except RecourselabError as err:
        log.error("%s", err)
        return 1
    raise AssertionError(f"unhandled command {args.command}")  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
