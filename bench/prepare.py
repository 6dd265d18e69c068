"""Benchmark of the prepare step: load + split + encode time per dataset, encode/decode throughput.

Writes bench/results/prepare.json. Run with `make bench` (or python bench/prepare.py).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from recourselab.config import Params
from recourselab.data import dataset_from_params, prepare_splits

log = logging.getLogger("bench.prepare")
OUT = Path(__file__).parent / "results" / "prepare.json"


def bench_dataset(name: str, params: Params) -> dict:
    t0 = time.perf_counter()
    raw = dataset_from_params(name, params)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    splits = prepare_splits(raw, 0, params.prepare.split)
    t_prepare = time.perf_counter() - t0
    train = splits.tables["train"][splits.schema.encoded_columns].to_numpy()
    t0 = time.perf_counter()
    decoded = splits.schema.inverse_transform(train)
    t_decode = time.perf_counter() - t0
    t0 = time.perf_counter()
    splits.schema.transform(decoded)
    t_encode = time.perf_counter() - t0
    n = len(raw.frame)
    return {"rows": n, "encoded_width": splits.schema.n_encoded, "load_s": t_load,
            "split_encode_s": t_prepare, "encode_rows_per_s": len(train) / t_encode,
            "decode_rows_per_s": len(train) / t_decode, "decode_over_encode": t_decode / t_encode}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)  # Prefect configured logging on import
    params = Params()
    results = {name: bench_dataset(name, params) for name in params.datasets}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2))
    for name, r in results.items():
        log.info("%-11s rows=%6d load %.2fs split+encode %.2fs encode %.0f rows/s decode/encode %.2f",
                 name, r["rows"], r["load_s"], r["split_encode_s"], r["encode_rows_per_s"],
                 r["decode_over_encode"])
    log.info("wrote %s", OUT)


if __name__ == "__main__":
    main()
