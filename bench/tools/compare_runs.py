"""Compare the outputs of two pipeline runs (two checkouts): every JSON value and the counterfactual tables.

Usage::

    python bench/tools/compare_runs.py BEFORE_CHECKOUT AFTER_CHECKOUT

Keys naming timings, hashes, versions, devices or provenance are skipped. Prints each differing
value, a count line, and per counterfactual table whether its shared columns are identical.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

#: Key fragments that are expected to differ between two runs of the same code and data.
SKIP = ("time", "seconds", "wall", "_s", "code_", "libraries", "hash", "version", "provenance", "device", "upstream")


def flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """``data`` as dotted key -> value; lists of plain values stay whole."""
    if isinstance(data, dict):
        return {k: v for key, value in data.items() for k, v in flat(value, f"{prefix}{key}.").items()}
    if isinstance(data, list) and any(isinstance(x, dict | list) for x in data):
        return {k: v for i, value in enumerate(data) for k, v in flat(value, f"{prefix}{i}.").items()}
    return {prefix[:-1]: data}


def compare_json(before: Path, after: Path) -> tuple[int, int, int, int]:
    """(same, different, new, removed) values over every JSON file of ``before``'s data/."""
    same = diff = new = removed = 0
    for fa in sorted(before.glob("data/**/*.json")):
        rel = fa.relative_to(before)
        if not (after / rel).exists():
            print(f"only in {before}: {rel}")
            continue
        a, b = flat(json.loads(fa.read_text())), flat(json.loads((after / rel).read_text()))
        for key in sorted(set(a) | set(b)):
            if any(s in key.lower() for s in SKIP):
                continue
            if key not in b:
                removed += 1
                print(f"removed {rel}:{key}")
            elif key not in a:
                new += 1
            elif a[key] == b[key]:
                same += 1
            else:
                diff += 1
                print(f"DIFF {rel}:{key}: {a[key]!r} -> {b[key]!r}"[:240])
    return same, diff, new, removed


def compare_tables(before: Path, after: Path) -> None:
    """Whether each counterfactual table's shared columns are identical in both runs."""
    for fa in sorted(before.glob("data/**/counterfactuals.parquet")):
        rel = fa.relative_to(before)
        if not (after / rel).exists():
            print(f"only in {before}: {rel}")
            continue
        ta, tb = pd.read_parquet(fa), pd.read_parquet(after / rel)
        cols = [c for c in ta.columns if c in tb.columns]
        new = sorted(set(tb.columns) - set(ta.columns))
        print(f"{rel}: {len(ta)} rows, {len(cols)} shared columns, identical={ta[cols].equals(tb[cols])}, "
              f"new columns={new}")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    before, after = map(Path, argv)
    same, diff, new, removed = compare_json(before, after)
    print(f"json values: {same} same, {diff} different, {new} new keys, {removed} removed")
    compare_tables(before, after)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
