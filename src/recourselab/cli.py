"""The ``recourselab`` command: one subcommand per pipeline stage, plus project helpers.

Stage subcommands run the same code as the DVC stage (``stages/<name>.py``) and must be
run inside a recourselab checkout (they write under ``data/``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import subprocess
import sys
from pathlib import Path

from recourselab.errors import RecourselabError

log = logging.getLogger(__name__)

STAGES: dict[str, str] = {
    "prepare": "split, encode and write data/prepared/<dataset>/seed=<s>/",
    "tune_ensemble": "tune the model zoo per seed, write data/ensemble/<dataset>/seed=<s>/",
    "train_flow": "train DensityFlow per seed, write data/densityflow/<dataset>/seed=<s>/",
    "distill": "distill DensityFlow towards the ensemble under a query budget, write data/distill/...",
    "generate": "DensityFlow counterfactuals + robustness metrics, write data/recourse/... and data/metrics/...",
    "ablate": "DensityFlow without its density term / distillation, write data/ablate/<dataset>/...",
    "discover": "DISCOVER distributional counterfactuals per model and seed, write data/discover/<dataset>/<model>/...",
}


def project_root(start: Path | None = None) -> Path:
    """The nearest directory at or above ``start`` holding ``dvc.yaml`` and ``stages/``."""
    start = (start or Path.cwd()).resolve()
    for d in (start, *start.parents):
        if (d / "dvc.yaml").is_file() and (d / "stages").is_dir():
            return d
    raise RecourselabError(f"no recourselab project (dvc.yaml + stages/) at or above {start}")


#: Stage options that take a path: given relative, they are read from the caller's folder.
PATH_OPTIONS = ("--params", "--out", "--prepared", "--ensemble", "--flow", "--recourse", "--metrics")


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


def run_stage(name: str, argv: list[str]) -> int:
    """Run stage ``name`` from the project root (its default paths are relative to it); path
    options given relative to the caller's folder keep pointing there."""
    root = project_root()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    argv = absolute_path_args(argv, Path.cwd())
    os.chdir(root)
    return importlib.import_module(f"stages.{name}").main(argv)


def pipeline_env(root: Path) -> dict[str, str]:
    """Environment for DVC and the stages: this interpreter first on PATH, quiet tools, and a
    Prefect home (default ``<root>/.recourselab/prefect``), created here: Prefect does not create
    missing parent folders, and its server then fails to open its database on a fresh checkout."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
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


def repro(dvc_args: list[str]) -> int:
    """``dvc repro`` with one local Prefect server for the run (none if nothing changed)."""
    from recourselab.prefect_server import local_server

    root = project_root()
    env = pipeline_env(root)
    dvc = [sys.executable, "-m", "dvc"]
    if "PREFECT_API_URL" in env or NO_RUN_OPTIONS.intersection(dvc_args):  # a server there, or nothing runs
        return subprocess.call([*dvc, "repro", *dvc_args], cwd=root, env=env)
    up_to_date = subprocess.call([*dvc, "status", "--quiet"], cwd=root, env=env) == 0
    if up_to_date and not dvc_args:
        return subprocess.call([*dvc, "repro"], cwd=root, env=env)
    with local_server(env=env) as url:
        if url:
            env["PREFECT_API_URL"] = url
        return subprocess.call([*dvc, "repro", *dvc_args], cwd=root, env=env)


def switch_profile(name: str, params_path: Path | None) -> int:
    """Write profile ``name`` to ``params_path`` (default: the project's params.yaml, from any subfolder)."""
    from recourselab.config import dump_params, render_profile
    from recourselab.io import write_bytes

    root = project_root()
    params_path = root / "params.yaml" if params_path is None else params_path
    params = render_profile(name, root)
    write_bytes(params_path, dump_params(params).encode())
    log.info("wrote profile %r to %s; `dvc repro` reruns exactly what changed", name, params_path)
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
    sub.add_parser("fetch-data", help="download and verify the registry-shipped dataset files")
    sub.add_parser("datasets", help="list the built-in datasets")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # Stage and repro arguments belong to the stage script / dvc: pass them through untouched.
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
    except RecourselabError as err:
        log.error("%s", err)
        return 1
    raise AssertionError(f"unhandled command {args.command}")  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
