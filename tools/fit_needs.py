"""Fit each rule's memory, time and disk to the sizes of what its jobs read (:mod:`bertology_core.jobs.needs`), from
finished runs.

    # once per finished run: each finished job's own record, its inputs' sizes and its outputs' bytes
    python tools/fit_needs.py measure --run /path/to/run --configfile configs/cpu.yaml --out benchmarks/needs/cpu.parquet
    # the lines, from every run measured (writes bertology_core/jobs/needs.yaml; prints measured against predicted)
    python tools/fit_needs.py fit benchmarks/needs/*.parquet [--write bertology_core/jobs/needs.yaml]
    # a run's jobs against the requests of the committed lines (exit 1 when a job was above its memory or time)
    python tools/fit_needs.py check run.parquet

``measure`` lists the run's jobs with a forced dry run of this repository's workflow in the run's folder under the
same config files (relative paths in them point into this repository, as for the run); a job counts when it
finished (:func:`estimate_runtime.finished`) and its log holds its record (peak resident memory, wall and CPU
seconds); its passes are those it made (``Stage.passes_run``, read from its outputs), else the most its settings
allowed. ``fit`` fits, per rule, the non-negative least-squares line of each kind over the measured jobs (relative errors:
each job weighs alike, whatever its size)
(:data:`bertology_core.jobs.needs.TERMS`); a term whose values do not span a factor of :data:`SPAN` over the rule's
jobs is left to the base (nothing says how the need grows with it; ``fit`` names the rules measured at one model size,
whose requests then do not grow with the model); a rule whose jobs all made one pass has no time term in passes; then
it raises a line's margin until every measured job is inside its request.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl
from scipy.optimize import nnls

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from bertology_core.jobs import needs as needs_model  # noqa: E402
from bertology_core.workflow import job_record  # noqa: E402
from bertology_core.workflow import jobs as jobs_module  # noqa: E402


def measure(run: Path, configfiles: list[str]) -> pl.DataFrame:
    from estimate_runtime import dry_run_jobs, experiment_of, finished

    experiment = experiment_of(configfiles)
    rows = []
    for job in dry_run_jobs(configfiles, directory=run):
        if not job.log or not finished(job, run):
            continue
        record = job_record.read(run / job.log)
        if record is None:
            continue
        try:
            batch = needs_model.Batch.of(needs_model.training_hyperparameters(job.rule, job.params))
            sizes = needs_model.job_sizes(job.inputs, root=run, batch=batch)
        except (FileNotFoundError, ValueError):  # an input removed since (a temporary dump): not sized
            continue
        if not all((run / path).exists() for path in job.outputs):
            continue
        outputs = [needs_model.disk_mb(run / path) for path in job.outputs]
        gives = [needs_model.path_mb(run / path) for path in job.outputs]
        named = job.named_outputs
        rows.append({"run": str(run), "rule": job.rule, "job": "/".join(job.wildcards.values()), "threads": job.threads,
                     "parameters": sizes.parameters, "read_mb": sizes.read_mb,
                     "batch_tokens": sizes.batch_tokens,
                     "passes": jobs_module.passes_run(experiment, job.rule, job.wildcards, {name: run / path for name, path in job.named_inputs.items() if isinstance(path, str)}, {name: str(run / path) for name, path in named.items()}),
                     "memory_mb": float(record["max_rss_mb"]) * 2**20 / 1e6,
                     "minutes": float(record["wall_seconds"]) / 60, "cpu_minutes": float(record["cpu_seconds"]) / 60,
                     "output_mb": outputs, "gives_mb": gives})
    return pl.DataFrame(rows, schema_overrides={"output_mb": pl.List(pl.Float64), "gives_mb": pl.List(pl.Float64)})


# a term enters a rule's line only where its jobs' values span this factor: a slope fitted on sizes that hardly differ
# (three tasks' dev files of 45 to 50 kB) says nothing of how the need grows and extrapolates noise
SPAN = 2.0


def fit_line(sizes: list[needs_model.Sizes], values: np.ndarray, terms: tuple[str, ...], least_margin: float,
             each: bool = True) -> needs_model.Line:
    """The non-negative least-squares line over ``terms``, and its margin: at least ``least_margin``, raised until
    every value is at or under the line times the margin (``each``: memory and time, where a job over its request is
    stopped), or until their total is (a disk line: an output's bytes follow settings no input says, as a split's share
    of a task's files, and what a disk holds is the total). Memory and time are fitted on relative errors (a 600 MB job
    and a 9 GB one count alike, so the margin that covers both stays small), disk on megabytes (what fills a disk)."""
    columns = {term: np.array([s.term(term) for s in sizes]) for term in terms}
    used = []
    for term in terms:
        column = columns[term]
        if term == "base" or column.max() >= SPAN * column.min() and column.max() > 0:
            used.append(term)
    matrix = np.stack([columns[term] for term in used], axis=1)
    scale = np.where(np.abs(matrix).max(axis=0) > 0, np.abs(matrix).max(axis=0), 1.0)
    weight = 1.0 / np.maximum(values, 1e-9 * max(1.0, values.max())) if each else np.ones_like(values)
    solution, _ = nnls(matrix / scale * weight[:, None], values * weight, maxiter=10_000)
    coefficients = {term: float(value / s) for term, value, s in zip(used, solution, scale)}
    line = needs_model.Line(coefficients)
    predicted = np.array([line.at(s) for s in sizes])
    if not each:
        total = float(predicted.sum())
        if total <= 0 and values.sum() > 0:  # nothing predicted: the mean in the base
            return needs_model.Line({**coefficients, "base": coefficients.get("base", 0.0) + float(values.mean())}, least_margin)
        return needs_model.Line(coefficients, max(least_margin, float(values.sum()) / total * 1.05 if total > 0 else least_margin))
    # a value the line says is nothing but is not (nothing, predicted as nothing, is inside any margin)
    ratio = np.max(np.where(predicted > 0, values / np.maximum(predicted, 1e-12), np.where(values > 0, np.inf, 0.0))) \
        if len(values) else 1.0
    margin = max(least_margin, float(ratio) * 1.05 if np.isfinite(ratio) else least_margin)
    if not np.isfinite(ratio):  # a value the line says is nothing: carry it in the base
        coefficients["base"] = coefficients.get("base", 0.0) + float(values.max())
        line = needs_model.Line(coefficients)
    return needs_model.Line(line.coefficients, margin)


def fit(frame: pl.DataFrame, memory: dict[str, str] | None = None) -> tuple[dict[str, needs_model.Need], pl.DataFrame]:
    """Each rule's :class:`~bertology_core.jobs.needs.Need` fitted on its measured jobs, and :func:`against` them
    (``memory``: how each rule's memory grows with what it reads, as its stage declares it; default: the stages')."""
    memory = jobs_module.memory_declared() if memory is None else memory
    found = {}
    for (rule,), jobs in frame.group_by(["rule"], maintain_order=True):
        sizes = [needs_model.Sizes(p, r, t, n) for p, r, t, n in zip(jobs["parameters"], jobs["read_mb"], jobs["batch_tokens"],
                                                                    jobs["passes"])]
        terms = dict(needs_model.TERMS)
        # a rule whose jobs go over what they read once has no term in passes; one whose jobs make several has its
        # reading only per pass (what it holds once, as a reference probe, is counted in every pass: its request
        # holds the most passes its settings allow, and too few of its jobs ran at full size to tell the two apart)
        several = not (jobs["passes"] == 1.0).all()
        terms["minutes"] = tuple(t for t in terms["minutes"] if t.endswith("x passes") == several or "read_mb" not in t)
        if not needs_model.memory_reads(rule, bool((jobs["parameters"] > 0).any()), memory):
            terms["memory_mb"] = tuple(t for t in terms["memory_mb"] if t != "read_mb")
        lines = {kind: fit_line(sizes, jobs[kind].to_numpy(), terms[kind], needs_model.MARGIN[kind])
                 for kind in ("memory_mb", "minutes")}
        per_pass = [term for term in terms["minutes"] if term.endswith("x passes")]
        if several and not any(lines["minutes"].coefficients.get(term, 0.0) for term in per_pass):
            # jobs whose time the fit cannot tie to their passes: the passes carry the time beyond the base all the
            # same, so that more passes ask for more
            lines["minutes"] = fit_line(sizes, jobs["minutes"].to_numpy(), ("base", *per_pass), needs_model.MARGIN["minutes"])
        # a job measured outside a run (benchmarks/stats_at_qqp_size.py) sizes no outputs
        sized = [(size, written, given) for size, written, given in zip(sizes, jobs["output_mb"].to_list(), jobs["gives_mb"].to_list())
                 if written is not None]
        disk, gives = (output_lines([s for s, *_ in sized], [row[i] for row in sized]) for i in (1, 2))
        found[rule] = needs_model.Need(rule, lines["memory_mb"], lines["minutes"], disk,
                                       f"{jobs.height} jobs of {jobs['run'].n_unique()} run(s)", gives)
    return found, against(frame, found)


def output_lines(sizes: list[needs_model.Sizes], outputs: list[list[float]]) -> tuple[needs_model.Line, ...]:
    """A line per output where every job of the rule has the same outputs, else one for their sum."""
    if len({len(o) for o in outputs}) == 1:
        return tuple(fit_line(sizes, np.array([o[i] for o in outputs]), needs_model.TERMS["disk_mb"],
                              needs_model.MARGIN["disk_mb"], each=False) for i in range(len(outputs[0])))
    return (fit_line(sizes, np.array([sum(o) for o in outputs]), needs_model.TERMS["disk_mb"], needs_model.MARGIN["disk_mb"],
                     each=False),)


def against(frame: pl.DataFrame, found: dict[str, needs_model.Need]) -> pl.DataFrame:
    """Every measured job of a rule in ``found`` beside its rule's line and request."""
    rows = []
    for row in frame.iter_rows(named=True):
        need = found.get(row["rule"])
        if need is None:
            continue
        s = needs_model.Sizes(row["parameters"], row["read_mb"], row["batch_tokens"], row["passes"])
        rows.append({"rule": row["rule"], "job": row["job"], "run": row["run"], "parameters": s.parameters, "read_mb": s.read_mb,
                     "peak_mb": row["memory_mb"], "predicted_mb": need.predict("memory_mb", s),
                     "request_mb": need.request("memory_mb", s), "minutes": row["minutes"],
                     "request_minutes": need.request("minutes", s),
                     "output_mb": None if row["output_mb"] is None else sum(row["output_mb"]),
                     "predicted_disk_mb": None if row["output_mb"] is None else need.predict("disk_mb", s, len(row["output_mb"]))})
    return pl.DataFrame(rows, schema_overrides={"output_mb": pl.Float64, "predicted_disk_mb": pl.Float64})


def read_measurements(path: Path) -> pl.DataFrame:
    """A file ``measure`` wrote, refused where it lacks a size the lines use (measured by older code)."""
    frame = pl.read_parquet(path)
    missing = [name for name in ("parameters", "read_mb", "batch_tokens", "passes", "gives_mb") if name not in frame.columns]
    if missing:
        raise SystemExit(f"{path}: measured without {missing}. Fix: measure its run again (tools/fit_needs.py measure).")
    return frame


def print_table(table: pl.DataFrame) -> int:
    """Per rule, its job with the highest peak beside its line and request; returns the jobs above their request."""
    print("| rule | jobs | parameters (M) | read (MB) | peak (MB) | line (MB) | request (MB) | longest (min) | request (min) "
          "| largest outputs (MB) | line (MB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (rule,), rows in sorted(table.group_by(["rule"]), key=lambda kv: -kv[1]["peak_mb"].max()):
        top = rows.row(int(rows["peak_mb"].arg_max()), named=True)
        longest = rows.row(int(rows["minutes"].arg_max()), named=True)
        largest = rows.row(int(rows["output_mb"].fill_null(-1.0).arg_max()), named=True)
        print(f"| {rule} | {rows.height} | {top['parameters']:.1f} | {top['read_mb']:.1f} | {top['peak_mb']:.0f} | "
              f"{top['predicted_mb']:.0f} | {top['request_mb']} | {longest['minutes']:.1f} | {longest['request_minutes']} | "
              f"{largest['output_mb']:.1f} | {largest['predicted_disk_mb']:.1f} |")
    over = table.filter((pl.col("peak_mb") > pl.col("request_mb")) | (pl.col("minutes") > pl.col("request_minutes")))
    print(f"{table.height} jobs of {table['rule'].n_unique()} rules; above their memory or runtime request: {over.height}")
    return over.height


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    measuring = commands.add_parser("measure")
    measuring.add_argument("--run", required=True, type=Path)
    measuring.add_argument("--configfile", nargs="+", required=True)
    measuring.add_argument("--out", required=True, type=Path)
    fitting = commands.add_parser("fit")
    fitting.add_argument("measurements", nargs="+", type=Path)
    fitting.add_argument("--write", type=Path, help="the needs file to write (bertology_core/jobs/needs.yaml)")
    checking = commands.add_parser("check", help="each measured job against the committed needs' request (exit 1 when above)")
    checking.add_argument("measurements", nargs="+", type=Path)
    args = parser.parse_args()
    if args.command == "measure":
        frame = measure(args.run.resolve(), args.configfile)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(args.out)
        print(f"{frame.height} jobs measured in {args.run} -> {args.out}")
        return
    frame = pl.concat([read_measurements(path) for path in args.measurements])
    if args.command == "check":
        raise SystemExit(1 if print_table(against(frame, needs_model.load())) else 0)
    found, table = fit(frame)
    print_table(table)
    one = sorted(rule for (rule,), jobs in frame.group_by(["rule"]) if (jobs["parameters"] > 0).all()
                 and jobs["parameters"].max() < SPAN * jobs["parameters"].min())
    if one:
        print(f"measured at one model size (their requests do not grow with the model): {', '.join(one)}")
    if args.write:
        sources = ", ".join(sorted({Path(p).name for p in args.measurements}))
        needs_model.dump(found, args.write, f"Written by tools/fit_needs.py from {sources} (benchmarks/needs/): each rule's\n"
                         "lines (bertology_core/jobs/needs.py). Do not edit by hand: measure a run and fit again.")
        print(f"wrote {args.write}")


if __name__ == "__main__":
    main()
