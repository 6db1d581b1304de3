"""Rule disabling_stats at QQP's whole dev set, which the size rehearsal (configs/rehearsal_scale.yaml) sweeps on 4,000
examples only (the whole set would take its CPU sweep three hours): the rule's own code on a table of QQP's
40,430 examples x 157 configurations (BERT-base's 144 heads, 12 layers and the intact model; 6,347,510 rows), tiled
from the rehearsal's sweep, with labels and predictions redrawn (85% of the intact predictions right, 5% of each
configuration's changed) so that the table is not one repeated value; one seed, 1,000 resamples, as the default.

    python benchmarks/stats_at_qqp_size.py build/rehearsal_scale [--out benchmarks/needs/stats_qqp.parquet]

Writes its peak memory and CPU time as one measured job (tools/fit_needs.py's columns; no outputs sized), so that the
fit of disabling_stats's lines sees a table of the default's largest size.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertology_core.data import tasks  # noqa: E402
from bertology_core.disabling import stats  # noqa: E402
from bertology_core.jobs import needs  # noqa: E402

EXAMPLES = 40_430


def qqp_table(sweep: Path, out: Path) -> None:
    base = pl.read_parquet(sweep)
    base = base.with_columns(pl.col("idx").rank("dense").cast(pl.Int64) - 1)  # the sample's examples as 0..n-1
    n = base["idx"].n_unique()
    table = pl.concat([base.with_columns(pl.col("idx") + k * n) for k in range(-(-EXAMPLES // n))]).filter(pl.col("idx") < EXAMPLES)
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, EXAMPLES)
    intact = np.where(rng.random(EXAMPLES) < 0.85, labels, 1 - labels)
    rows = table["idx"].to_numpy()
    flip = rng.random(table.height) < 0.05
    table = table.with_columns(pl.Series("label", labels[rows]), pl.Series("intact_prediction", intact[rows]),
                               pl.Series("prediction", np.where(flip, 1 - intact[rows], intact[rows])))
    table.write_parquet(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the size rehearsal's folder (build/rehearsal_scale)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/needs/stats_qqp.parquet"))
    args = parser.parse_args()
    table = args.run / "results" / "stats_qqp_sweep.parquet"
    if not table.exists():
        qqp_table(args.run / "results/disabling/bert-base-narrow/QQP/finetuned/seed1/sweep.parquet", table)
    read_mb = needs.path_mb(table)
    # what workflow_scripts/disabling_stats.py does, for one seed
    started, wall = time.process_time(), time.perf_counter()
    task = tasks.Task.from_meaning({"name": "QQP", "label_names": ["0", "1"], "label_range": None, "metrics": ["accuracy", "f1"]})
    sweeps = pl.read_parquet(table).with_columns(pl.lit(1).alias("seed"))
    for (_mode,), frame in sorted(sweeps.partition_by("mode", as_dict=True).items()):
        arrays = stats.SweepArrays.from_frame(frame)
        stats.deltas_table(arrays, task.main_metric, 1000, 0.95, 0)
        stats.selection_table(arrays, stats.split_halves(arrays.labels, stratify=True, seed=0), task.main_metric, 1000, 0.95, 0)
    cpu, wall = time.process_time() - started, time.perf_counter() - wall
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # Linux: KiB
    row = {"run": f"{args.run} (benchmarks/stats_at_qqp_size.py)", "rule": "disabling_stats", "job": f"QQP/finetuned/{sweeps.height} rows",
           "threads": 1, "parameters": 0.0, "read_mb": read_mb, "batch_tokens": 0.0, "passes": 1.0, "memory_mb": peak, "minutes": wall / 60,
           "cpu_minutes": cpu / 60, "output_mb": None, "gives_mb": None}
    pl.DataFrame([row], schema_overrides={"output_mb": pl.List(pl.Float64), "gives_mb": pl.List(pl.Float64)}).write_parquet(args.out)
    print(f"{sweeps.height:,} rows, {read_mb:.1f} MB as read: peak {peak:,.0f} MB, {cpu:.0f} CPU s, {wall:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
