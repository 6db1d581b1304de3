"""Sweep table benchmark: peak memory of building and writing a disabling sweep's per-example table at full QQP dev
(40,430 examples) for BERT-base (12 x 12 heads, 156 configurations: 6.3M rows), built as the sweep builds it
(:func:`bertology_core.disabling.sweeps.sweep_frame`: each configuration's columns gathered from the short list of
configurations) against Python lists of every row (how it was built before), in fresh subprocesses, side by side.

    python benchmarks/sweep_tables.py [--examples 40430] [--out BENCHMARKS.md]

Writes (replaces) the section "Sweep tables" of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import subprocess
import sys
from pathlib import Path

from profile_times import write_section

SECTION = "## Sweep tables"
REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, tempfile
import numpy as np, polars as pl
sys.path.insert(0, {repo!r})
from bertology_core.data import tasks
from bertology_core.data.io import write_parquet
from bertology_core.disabling import sweeps

way, n = {way!r}, {examples}
imported_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
configs = sweeps.sweep_configurations(12, 12, layers=True)
task = tasks.glue_task("QQP")
rng = np.random.default_rng(0)
dev = pl.DataFrame({{"idx": np.arange(n), "label": rng.integers(0, 2, n)}})
predictions = rng.integers(0, 2, (len(configs), n))
intact = np.repeat(rng.integers(0, 2, n)[None], len(configs), axis=0)
if way == "gathered":
    frame = sweeps.sweep_frame(task, dev, configs, predictions, intact, "uniform")
else:  # Python lists of every row
    frame = pl.DataFrame({{
        "mode": ["uniform"] * (len(configs) * n),
        "config": np.repeat([c.name for c in configs], n),
        "kind": np.repeat([c.kind for c in configs], n),
        "layer": pl.Series(np.repeat([c.layer for c in configs], n).tolist(), dtype=pl.Int16),
        "head": pl.Series(np.repeat([c.head for c in configs], n).tolist(), dtype=pl.Int16),
        "idx": np.tile(dev["idx"].to_numpy(), len(configs)),
        "label": np.tile(dev["label"].to_numpy(), len(configs)),
        "prediction": pl.Series(predictions.reshape(-1), dtype=pl.Int64),
        "intact_prediction": pl.Series(intact.reshape(-1), dtype=pl.Int64),
    }})
with tempfile.TemporaryDirectory() as folder:
    write_parquet(frame, folder + "/sweep.parquet")
print(json.dumps({{"rows": frame.height, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                   "imported_mb": imported_mb,
                   "schema": {{k: str(v) for k, v in frame.schema.items()}}}}))
"""


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def measure(way: str, examples: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO), way=way, examples=examples)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=40430)
    parser.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    args = parser.parse_args()
    gathered, lists = measure("gathered", args.examples), measure("lists", args.examples)
    assert gathered["schema"] == lists["schema"], (gathered["schema"], lists["schema"])
    lines = [SECTION, "",
             f"Machine: {cpu_name()}, {dt.date.today()}; command: "
             f"`python benchmarks/sweep_tables.py --examples {args.examples}`.", "",
             f"A BERT-base head-and-layer sweep's per-example table at {args.examples} dev examples ({gathered['rows']:,} rows, "
             "the same columns and types either way), built and written to Parquet in a fresh process:", "",
             "| built from | peak RSS (MB) | of which the imports (torch, polars) |", "|---|---|---|",
             f"| the configurations' short lists, gathered (the sweep's way) | {gathered['peak_mb']:.0f} | {gathered['imported_mb']:.0f} |",
             f"| Python lists of every row (before) | {lists['peak_mb']:.0f} | {lists['imported_mb']:.0f} |", "",
             f"Ratio: {gathered['peak_mb'] / lists['peak_mb']:.2f} of the peak; the table's own part "
             f"{(gathered['peak_mb'] - gathered['imported_mb']) / (lists['peak_mb'] - lists['imported_mb']):.2f}.", ""]
    write_section(Path(args.out), "\n".join(lines))


if __name__ == "__main__":
    main()
