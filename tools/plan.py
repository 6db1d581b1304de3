"""What a config will need before it runs: its jobs, each rule's largest memory request, the runtime it asks for and
the disk its results and training checkpoints take (bertology_core/jobs/needs.py), against the free space of the
folder it will run in. The start of every run prints the same for the jobs it is about to run, and stops there when
the disk is short (config ``compute.check_disk``).

    python tools/plan.py --configfile config.yaml [--jobs 100] [--directory RUN_FOLDER] [--go-on] [--submissions]

Every job of the config is counted (a forced dry run), whatever is already done. Inputs are sized as they are where
they exist; the rest as the jobs that write them are predicted to write them, so a plan made before anything ran
sizes the whole run from the raw data and the models' weights. ``--jobs``: how many jobs run at once (a cluster
profile's ``jobs``; locally, the cores), which sets how many training checkpoints exist at once. Exits 1 when the
disk need is above the free space, unless ``--go-on``. ``--submissions``: how a cluster profile that packs the short
model jobs (profiles/slurm) submits the jobs that are not local, one by one and packed as the workflow packs them
(bertology_core/jobs/submissions.py, by the runtime each asks for here).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from estimate_runtime import dry_run_jobs, experiment_of, rule_passes  # noqa: E402

from bertology_core.jobs import needs, submissions  # noqa: E402
from bertology_core.workflow import configuration  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", nargs="+", required=True)
    parser.add_argument("--jobs", type=int, default=2, help="jobs at once (default 2: this repository's CPU profile)")
    parser.add_argument("--directory", type=Path, default=ROOT, help="the folder the run writes results/ in")
    parser.add_argument("--go-on", action="store_true", help="exit 0 even when the disk is short")
    parser.add_argument("--submissions", action="store_true", help="how a cluster profile submits the jobs")
    args = parser.parse_args()
    directory = args.directory.resolve()
    jobs = dry_run_jobs(args.configfile, directory=directory)
    config = configuration.merged([ROOT / "config.yaml", *args.configfile])
    config.setdefault("compute", {}).setdefault("mem_mb", {})
    cache = config.get("model_cache")
    models = needs.model_parameters({model["name"]: model["spec"] for model in config["models"]}, ROOT,
                                    None if cache is None else ROOT / Path(cache).expanduser())
    planned = [needs.PlannedJob.of(job.rule, job.inputs, job.outputs, job.threads, job.wildcards, job.params,
                                   job.named_outputs, job.resources.get("runtime"), job.named_inputs) for job in jobs]
    plan = needs.plan(planned, needs.load(), directory, config["compute"]["mem_mb"], models, rule_passes(args.configfile))
    free = needs.free_mb(directory)
    print(plan.summary(args.jobs, free))
    if args.submissions:
        experiment = experiment_of(args.configfile)
        sized = submissions.sized_tasks(experiment.tasks, lambda task: experiment.source_rows(task, "train"), directory)
        print(f"\n{submitted(jobs, plan, config['compute']['submission_minutes'], sized)}")
    if unsized := needs.unsized_models({path: value for path, value in models.items() if not (directory / path).exists()}):
        print(f"\n{unsized}")
    problem = needs.disk_problem(plan.needed_mb(args.jobs), directory, "--go-on")
    if problem:
        print(f"\n{problem}")
        if not args.go_on:
            raise SystemExit(1)


def submitted(jobs, plan: needs.Plan, target: float, sized: set[str]) -> str:
    """:func:`submissions.report` of the planned jobs that are not local (a job's parents: the jobs writing its inputs)."""
    keys = [submissions.key(job.rule, job.wildcards) for job in jobs]
    writer = {path: key for job, key in zip(jobs, keys) for path in job.outputs}
    parents = {key: {writer[path] for path in job.inputs if path in writer} for job, key in zip(jobs, keys)}
    pieces = [found for job, row in zip(jobs, plan.rows)
              if (found := submissions.piece(job.rule, job.wildcards, row.minutes)) is not None]
    placed = submissions.pack(pieces, target, parents, sized)
    cluster = [(key, row.minutes, bool(job.resources.get("gpu") or job.resources.get("gres")))
               for job, key, row in zip(jobs, keys, plan.rows) if not job.local]
    return submissions.report(cluster, placed, target)


if __name__ == "__main__":
    main()
