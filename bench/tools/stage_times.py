"""Minutes per stage and dataset of a ``recourselab repro`` run, from its log.

DVC prints ``Running stage 'NAME@DATASET':`` without a time; the stages' own log lines carry one. A
stage's span runs from the last timestamp before its ``Running stage`` line (the end of the stage
before it, or ``--start``) to the last timestamp before the next stage's line (or ``--end``), so
process start-up and DVC's hashing count to the stage they precede and the spans add up to the run.
Stages DVC skipped print no ``Running stage`` line and take no time here. A pool's first line
(``recourselab.pool: pool STAGE: ...``) opens a span ``STAGE (pool)`` in a column ``pool``.

With ``--run-log`` (the run's ``.recourselab/runs/*.jsonl``, whose records hold each stage body's own
wall time), a second table splits every stage's minutes into its body (``main()`` of the stage: the
flow's imports, the Prefect flow run, worker start-up and the tasks) and the fixed cost around it
(DVC's hashing and lock, the stage process's start-up and its module imports).

Writes JSON (``--out``) and prints Markdown tables (stages x datasets, minutes, and the total).
Run: ``python bench/tools/stage_times.py LOG [--start "2026-12-04 18:07:40"] [--end ...] [--run-log J] [--out F]``.
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import datetime
from pathlib import Path

STAGE = re.compile(r"^Running stage '([\w-]+)(?:@([\w-]+))?':")
STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
#: The first line of a pool (``recourselab repro`` with ``orchestration.pool``): a span ``<stage> (pool)``.
POOL = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),\d+ INFO recourselab\.pool: pool ([\w-]+): ")
FORMAT = "%Y-%m-%d %H:%M:%S"


def stage_spans(lines: list[str], start: datetime | None = None,
                end: datetime | None = None) -> list[tuple[str, str, float]]:
    """(stage, dataset, seconds) of each stage run, in log order.

    Raises
    ------
    ValueError
        When the log holds no timestamp to open the first stage and no ``start`` is given.
    """
    spans: list[tuple[str, str, float]] = []
    current: tuple[str, str] | None = None
    opened = last = start
    for line in lines:
        if m := POOL.match(line):
            last = datetime.strptime(m.group(1), FORMAT)
            if current is not None:
                spans.append((*current, (last - opened).total_seconds()))
            current, opened = (f"{m.group(2)} (pool)", "pool"), last
        elif m := STAMP.match(line):
            last = datetime.strptime(m.group(1), FORMAT)
        elif m := STAGE.match(line):
            if current is not None:
                spans.append((*current, (last - opened).total_seconds()))
            if last is None:
                raise ValueError("no timestamp before the first stage: give --start")
            current, opened = (m.group(1), m.group(2) or ""), last
    if current is not None:
        spans.append((*current, ((end or last) - opened).total_seconds()))
    return spans


def table(spans: list[tuple[str, str, float]]) -> tuple[dict[str, dict[str, float]], str]:
    """Minutes per stage and dataset, and the Markdown table of them with row and column totals."""
    minutes: dict[str, dict[str, float]] = {}
    for stage, dataset, seconds in spans:
        row = minutes.setdefault(stage, {})
        row[dataset] = row.get(dataset, 0.0) + seconds / 60
    datasets = list(dict.fromkeys(d for _, d, _ in spans))
    head = ["stage (min)", *[d or "-" for d in datasets], "all"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for stage, row in minutes.items():
        cells = [f"{row[d]:.1f}" if d in row else "" for d in datasets]
        out.append(f"| {stage} | " + " | ".join(cells) + f" | {sum(row.values()):.1f} |")
    total = sum(sum(r.values()) for r in minutes.values())
    out.append("| **all** | " + " | ".join("" for _ in datasets) + f" | **{total:.1f}** |")
    return minutes, "\n".join(out)


def split_fixed_cost(minutes: dict[str, dict[str, float]],
                     records: list[dict]) -> tuple[dict[str, dict[str, float]], str]:
    """Per stage: the span (minutes), the stage bodies' wall time from the run log, and the rest.

    Returns the numbers and a Markdown table with a total row.
    """
    body: dict[str, float] = {}
    for record in records:
        if record.get("pool"):  # one record per dataset, each with the whole pool's wall time
            name = f"{record['stage']} (pool)"
            body[name] = max(body.get(name, 0.0), float(record.get("wall_s", 0.0)) / 60)
            continue
        body[record["stage"]] = body.get(record["stage"], 0.0) + float(record.get("wall_s", 0.0)) / 60
    rows = {stage: {"span": sum(row.values()), "body": body.get(stage, 0.0), "runs": len(row)}
            for stage, row in minutes.items()}
    for row in rows.values():
        row["fixed"] = row["span"] - row["body"]
    out = ["| stage | runs | span (min) | body (min) | fixed cost (min) | fixed per run (s) |",
           "|---|---|---|---|---|---|"]
    for stage, row in rows.items():
        out.append(f"| {stage} | {row['runs']} | {row['span']:.1f} | {row['body']:.1f} | {row['fixed']:.1f} | "
                   f"{60 * row['fixed'] / row['runs']:.0f} |")
    tot = {k: sum(r[k] for r in rows.values()) for k in ("runs", "span", "body", "fixed")}
    out.append(f"| **all** | {tot['runs']} | {tot['span']:.1f} | {tot['body']:.1f} | {tot['fixed']:.1f} | "
               f"{60 * tot['fixed'] / max(tot['runs'], 1):.0f} |")
    return rows, "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--start", help="when the run started (YYYY-mm-dd HH:MM:SS)")
    parser.add_argument("--end", help="when the run ended (default: its last timestamp)")
    parser.add_argument("--run-log", type=Path, help="the run's .recourselab/runs/*.jsonl: split body and fixed cost")
    parser.add_argument("--out", type=Path, help="JSON file for the minutes")
    args = parser.parse_args()
    parse = (lambda s: datetime.strptime(s, FORMAT) if s else None)  # noqa: E731
    spans = stage_spans(args.log.read_text().splitlines(), parse(args.start), parse(args.end))
    minutes, md = table(spans)
    result = {"log": str(args.log), "minutes": minutes, "total_min": sum(sum(r.values()) for r in minutes.values())}
    if args.run_log:
        records = [json.loads(line) for line in args.run_log.read_text().splitlines() if line.strip()]
        result["split"], split_md = split_fixed_cost(minutes, records)
        md += "\n\n" + split_md
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    print(md)  # noqa: T201


if __name__ == "__main__":
    main()
