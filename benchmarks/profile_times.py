"""Wall time and memory of every job of a finished run, from Snakemake's own benchmark files.

    python benchmarks/profile_times.py [--results results] [--log .snakemake/log/<run>.log ...] [--out BENCHMARKS.md]

Writes (replaces) the section "CPU profile: wall time per job" of BENCHMARKS.md, with the
machine, the date and the run's total wall time (first to last timestamp of its Snakemake log).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
from pathlib import Path

import polars as pl

SECTION = "## CPU profile: wall time per job"


def machine() -> str:
    model = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        found = re.search(r"model name\s*:\s*(.+)", cpuinfo.read_text())
        model = found.group(1).strip() if found else model
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{model} ({vector_extensions()}), {os.cpu_count()} cores, {mem_gb:.0f} GiB RAM, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")


def vector_extensions() -> str:
    """The CPU's vector extensions that decide torch's speed here (one machine of a kind may have AVX-512, another
    AVX only): a time measured on one is not a time on the other."""
    cpuinfo = Path("/proc/cpuinfo")
    flags = set(re.search(r"flags\s*:\s*(.+)", cpuinfo.read_text()).group(1).split()) if cpuinfo.exists() else set()
    wanted = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")
    present = [flag for flag in wanted if flag in flags]
    return "vector extensions: " + (", ".join(present) if present else "none of " + ", ".join(wanted))


def read_benchmarks(results: Path) -> pl.DataFrame:
    rows = []
    for path in sorted((results / "benchmarks").rglob("*.tsv")):
        job = path.relative_to(results / "benchmarks").with_suffix("")
        frame = pl.read_csv(path, separator="\t")
        rows.append({"rule": job.parts[0], "job": "/".join(job.parts[1:]), "seconds": frame["s"][0],
                     "max_rss_mb": frame["max_rss"][0], "cpu_seconds": frame["cpu_time"][0]})
    return pl.DataFrame(rows)


def log_minutes(log: Path) -> tuple[float, str]:
    """Minutes from the first to the last timestamp of one Snakemake log, and a description."""
    stamps = re.findall(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]", log.read_text(), flags=re.M)
    if len(stamps) < 2:
        raise ValueError(f"{log}: no job timestamps")
    parse = lambda s: dt.datetime.strptime(" ".join(s.split()), "%a %b %d %H:%M:%S %Y")  # noqa: E731
    minutes = (parse(stamps[-1]) - parse(stamps[0])).total_seconds() / 60
    return minutes, f"{minutes:.1f} min ({log.name}, {stamps[0]} to {stamps[-1]})"


def run_wall_time(logs: list[Path]) -> str:
    """The wall time of the run, or of the runs that together produced the results (summed)."""
    if not logs or not all(log.exists() for log in logs):
        return "unknown (no Snakemake log given)"
    measured = [log_minutes(log) for log in logs]
    if len(measured) == 1:
        return measured[0][1]
    return f"{sum(m for m, _ in measured):.1f} min in {len(measured)} runs: " + " + ".join(d for _, d in measured)


def markdown(jobs: pl.DataFrame, wall: str, command: str) -> str:
    per_rule = jobs.group_by("rule", maintain_order=True).agg(
        pl.len().alias("jobs"), pl.col("seconds").sum().round(0).alias("sum_s"), pl.col("seconds").max().round(0).alias("max_s"),
        pl.col("cpu_seconds").sum().round(0).alias("cpu_s"),
    )
    lines = [
        SECTION, "",
        f"- date: {dt.date.today().isoformat()}",
        f"- machine: {machine()}",
        f"- command: `{command}`",
        f"- whole run, wall time: {wall}",
        f"- sum of the wall times of the jobs whose results are kept, over 2 (two jobs at a time): "
        f"{jobs['seconds'].sum() / 120:.1f} min, about what one fresh run needs",
        "- measured: Snakemake `benchmark:` files (`results/benchmarks/`); jobs run two at a time, one thread each",
        f"- CPU seconds of all jobs: {jobs['cpu_seconds'].sum():.0f} ({jobs['cpu_seconds'].sum() / 120:.1f} min over 2 cores)",
        "",
        "| rule | jobs | sum of job wall times (s) | sum of job CPU times (s) | longest job (s) |", "|---|---|---|---|---|",
        *[f"| {r['rule']} | {r['jobs']} | {r['sum_s']:.0f} | {r['cpu_s']:.0f} | {r['max_s']:.0f} |" for r in per_rule.iter_rows(named=True)],
        "",
        "| job | wall (s) | CPU (s) | max RSS (MB) |", "|---|---|---|---|",
        *[f"| {r['rule']}/{r['job']} | {r['seconds']:.0f} | {r['cpu_seconds']:.0f} | {r['max_rss_mb']:.0f} |"
          for r in jobs.sort("rule", "job").iter_rows(named=True)],
        "",
    ]
    return "\n".join(lines)


def replace_section(document: str, section: str) -> str:
    """Replace the section whose heading is ``section``'s first line (or append it)."""
    heading = section.splitlines()[0]
    start = document.find(heading + "\n")
    if start < 0:
        return document.rstrip("\n") + "\n\n" + section
    end = document.find("\n## ", start + len(heading))
    return document[:start] + section.rstrip("\n") + "\n\n" + (document[end + 1:] if end >= 0 else "")


def write_section(path: Path, section: str) -> None:
    """Replace (or append) ``section`` in the Markdown file at ``path`` and print it."""
    document = path.read_text() if path.exists() else "# Benchmarks\n"
    path.write_text(replace_section(document, section))
    print(section)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--log", type=Path, action="append", help="Snakemake log of the run (default: the newest); "
                        "repeat it when several runs produced the results")
    parser.add_argument("--out", type=Path, default=Path("BENCHMARKS.md"))
    parser.add_argument("--command", default="make cpu", help="the command that produced the run")
    args = parser.parse_args()
    logs = sorted(Path(".snakemake/log").glob("*.snakemake.log"))
    chosen = args.log or logs[-1:]
    write_section(args.out, markdown(read_benchmarks(args.results), run_wall_time(chosen), args.command))


if __name__ == "__main__":
    main()
