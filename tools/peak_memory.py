"""Each rule's measured peak memory against the ``mem_mb`` it asks for, and the disk its outputs hold, from a finished
run: what sets a rule's ``mem_mb`` (a measured peak plus a margin) and proves that none is exceeded.

    python tools/peak_memory.py --configfile configs/cpu.yaml [--run RUN_FOLDER] [--margin 1.5]

The jobs are those of a dry run of the config (tools/estimate_runtime.py's); each job's peak resident memory is the one
its process recorded in its log as it exited (:mod:`bertology_core.workflow.job_record`: the kernel's own peak, not a
sample), its ``mem_mb`` the first attempt's. Per rule: jobs measured, the largest peak and its job, ``mem_mb``, peak
over ``mem_mb``, the ``mem_mb`` the margin suggests, and the bytes its outputs hold (folders summed). Exits 1 when a
peak is above its job's ``mem_mb``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from estimate_runtime import dry_run_jobs, finished  # noqa: E402

from bertology_core.workflow import job_record  # noqa: E402


def output_bytes(paths: tuple[str, ...], run: Path) -> int:
    total = 0
    for name in paths:
        path = run / name
        if path.is_dir():
            total += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        elif path.is_file():
            total += path.stat().st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", nargs="+", required=True)
    parser.add_argument("--run", default=str(ROOT), help="the finished run's folder (holding results/ and logs/)")
    parser.add_argument("--margin", type=float, default=1.5, help="suggested mem_mb: the largest peak times this, rounded up to 500 MB")
    args = parser.parse_args()
    run = Path(args.run)
    rows: dict[str, dict] = defaultdict(lambda: {"jobs": 0, "measured": 0, "peak": 0.0, "at": "", "mem_mb": 0, "bytes": 0, "over": 0})
    for job in dry_run_jobs(args.configfile):
        row = rows[job.rule]
        row["jobs"] += 1
        row["bytes"] += output_bytes(job.outputs, run)
        mem_mb = int(job.resources.get("mem_mb") or 0)
        row["mem_mb"] = max(row["mem_mb"], mem_mb)
        record = job_record.read(run / job.log) if job.log and finished(job, run) else None
        if record is None:
            continue
        row["measured"] += 1
        peak = float(record["max_rss_mb"]) * 2**20 / 1e6  # MiB -> MB, the unit of mem_mb
        row["over"] += bool(mem_mb) and peak > mem_mb
        if peak > row["peak"]:
            row["peak"], row["at"] = peak, "/".join(job.wildcards.values())
    print("| rule | jobs measured | peak RSS (MB) | job at peak | mem_mb | peak / mem_mb | suggested mem_mb | outputs (MB) |")
    print("|---|---|---|---|---|---|---|---|")
    over = 0
    for rule, row in sorted(rows.items(), key=lambda kv: -kv[1]["peak"]):
        over += row["over"]
        share = f"{row['peak'] / row['mem_mb']:.2f}" if row["mem_mb"] and row["measured"] else ""
        suggested = max(500, math.ceil(row["peak"] * args.margin / 500) * 500) if row["measured"] else ""
        print(f"| {rule} | {row['measured']}/{row['jobs']} | {row['peak']:.0f} | {row['at']} | {row['mem_mb']} | {share} | "
              f"{suggested} | {row['bytes'] / 1e6:.1f} |")
    if over:
        print(f"{over} job(s) peaked above their mem_mb")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
