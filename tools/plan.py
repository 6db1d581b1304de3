"""What a config will need before it runs: its jobs, each rule's largest memory request, the runtime it asks for and
the disk its results and training checkpoints take (bertology_core/jobs/needs.py), against the free space of the
folder it will run in. The start of every run prints the same for the jobs it is about to run, and stops there when
the disk is short (config ``compute.check_disk``).

    python tools/plan.py --configfile config.yaml [--jobs 100] [--directory RUN_FOLDER] [--go-on] [--submissions]
        [--cards h100 a100 l40s [--tokenizer FOLDER] [--cpu-rates FILE] [--stand-in TASK:SPLIT=TASK:SPLIT]]

Every job of the config is counted (a forced dry run), whatever is already done. Inputs are sized as they are where
they exist; the rest as the jobs that write them are predicted to write them, so a plan made before anything ran
sizes the whole run from the raw data and the models' weights. ``--jobs``: how many jobs run at once (a cluster
profile's ``jobs``; locally, the cores), which sets how many training checkpoints exist at once. Exits 1 when the
disk need is above the free space, unless ``--go-on``. ``--submissions``: how a cluster profile that packs the short
model jobs (profiles/slurm) submits the jobs that are not local, one by one and packed as the workflow packs them
(bertology_core/jobs/submissions.py, by the runtime each asks for here).

Every plan ends with each stage's jobs, CPU-hours (expected and requested) and results on disk, and the totals without
the probing stages (probing, layer_mix: the largest results). ``--cards``: the model jobs priced on GPUs no one here
measured (tools/calibrate.py CARDS: data-sheet peaks at a share of them and each pass's counted kernels at a launch
cost each, the range RANGE; the cost model of tools/estimate_runtime.py), one at a time on one card; the rules that run no timed pass on the CPU beside it, priced by
the CPU-side rates of ``--cpu-rates`` (default: the newest in benchmarks/rates/).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from estimate_runtime import _model_folder, dry_run_jobs, experiment_of, for_pricing, rule_passes, token_lengths  # noqa: E402

from bertology_core.jobs import needs, submissions  # noqa: E402
from bertology_core.workflow import configuration  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", nargs="+", required=True)
    parser.add_argument("--jobs", type=int, default=2, help="jobs at once (default 2: this repository's CPU profile)")
    parser.add_argument("--directory", type=Path, default=ROOT, help="the folder the run writes results/ in")
    parser.add_argument("--go-on", action="store_true", help="exit 0 even when the disk is short")
    parser.add_argument("--submissions", action="store_true", help="how a cluster profile submits the jobs")
    parser.add_argument("--cards", nargs="+", metavar="CARD", help="price the model jobs on these assumed GPUs (h100, a100, l40s)")
    parser.add_argument("--tokenizer", help="with --cards: a model folder (config.json and tokenizer) of the config model's geometry (default: the config's first "
                        "model, where it is a folder or package)")
    parser.add_argument("--cpu-rates", metavar="FILE", help="with --cards: the CPU-side rates (estimate_runtime.py --fit-stages)")
    parser.add_argument("--stand-in", action="append", default=[], metavar="TASK:SPLIT=TASK:SPLIT",
                        help="with --cards: price a split not on this machine by another's lengths (estimate_runtime.py)")
    args = parser.parse_args()
    directory = args.directory.resolve()
    jobs = dry_run_jobs(args.configfile, directory=directory)
    config = configuration.merged([ROOT / "config.yaml", *args.configfile])
    config.setdefault("compute", {}).setdefault("mem_mb", {})
    cache = config.get("model_cache")
    models = needs.model_parameters({model["name"]: model["spec"] for model in config["models"]}, ROOT,
                                    None if cache is None else ROOT / Path(cache).expanduser(),
                                    experiment_of(args.configfile).given_runs())
    planned = [needs.PlannedJob.of(job.rule, job.inputs, job.outputs, job.threads, job.wildcards, job.params,
                                   job.named_outputs, job.resources.get("runtime"), job.named_inputs) for job in jobs]
    plan = needs.plan(planned, needs.load(), directory, config["compute"]["mem_mb"], models, rule_passes(args.configfile))
    free = needs.free_mb(directory)
    print(plan.summary(args.jobs, free))
    print(f"\n{per_stage(plan, args.jobs)}")
    if args.cards:
        print(f"\n{on_cards(jobs, args)}")
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


# the stages whose results are most of a run's disk: a plan also says what the run is without them
PROBING_STAGES = ("probing", "layer_mix")


def rule_stages() -> dict[str, str]:
    """Rule -> its stage: the rule file that defines it (rules/<stage>.smk)."""
    pattern = re.compile(r"^(?:rule|checkpoint) (\w+):", re.MULTILINE)
    return {rule: path.stem for path in sorted((ROOT / "rules").glob("*.smk")) for rule in pattern.findall(path.read_text())}


def per_stage(plan: needs.Plan, jobs_at_once: int) -> str:
    """Each stage's jobs, CPU-hours expected (the fitted lines) and requested, and results on disk, with the totals and
    the totals without :data:`PROBING_STAGES`."""
    stage_of = rule_stages()
    stages: dict[str, list[float]] = {}
    for rule in plan.by_rule():
        # a rule of no stage's file: the Snakefile's (all)
        entry = stages.setdefault(stage_of.get(rule["rule"], "Snakefile"), [0, 0.0, 0.0, 0.0])
        for index, key in enumerate(("jobs", "expected_hours", "cpu_hours", "disk_mb")):
            entry[index] += rule[key]
    lines = ["| stage | jobs | CPU-hours expected | CPU-hours requested | results (GB) |", "|---|---|---|---|---|"]
    for stage, (count, expected, requested, disk) in sorted(stages.items(), key=lambda item: -item[1][1]):
        lines.append(f"| {stage} | {count:.0f} | {expected:,.1f} | {requested:,.1f} | {disk / 1e3:,.2f} |")
    for label, kept in (("all", stages), (f"without {' and '.join(PROBING_STAGES)}",
                                           {k: v for k, v in stages.items() if k not in PROBING_STAGES})):
        count, expected, requested, disk = (sum(v[i] for v in kept.values()) for i in range(4))
        lines.append(f"| **{label}** | {count:.0f} | {expected:,.1f} | {requested:,.1f} | {disk / 1e3:,.2f} |")
    checkpoints = plan.checkpoint_mb(jobs_at_once) / 1e3
    return ("Per stage (CPU-hours: hours x threads, on a CPU like the one the lines were fitted on):\n" + "\n".join(lines)
            + f"\nand {checkpoints:,.2f} GB of training checkpoints held at once ({jobs_at_once} job(s) at a time).")


def on_cards(jobs, args) -> str:
    """The model jobs priced on each assumed card (tools/calibrate.py), at the assumed share of its peak and launch cost
    and at the range's ends (:data:`calibrate.RANGE`), and the CPU-side work beside them."""
    from calibrate import CARDS, KERNELS, RANGE, assumed_calibration, kernels

    from bertology_core.cost import estimate

    unknown = sorted(set(args.cards) - set(CARDS))
    if unknown:
        raise SystemExit(f"--cards {unknown}: not among the assumed cards {sorted(CARDS)} (tools/calibrate.py CARDS)")
    rates = args.cpu_rates or max((str(p) for p in (ROOT / "benchmarks" / "rates").glob("*.json")), default=None)
    stand_ins = {tuple(left.split(":")): tuple(right.split(":")) for left, right in (item.split("=") for item in args.stand_in)}
    folder = args.tokenizer or _model_folder(args.configfile)
    lengths = token_lengths(jobs, folder, stand_ins)
    from bertology_core.cost.model import Geometry
    from bertology_core.models import compatibility

    # the passes of the config's model (a folder given for its tokenizer: of that folder's config)
    geometry = Geometry.from_config(compatibility.read_config(Path(folder)))
    priced_jobs = for_pricing([dataclasses.replace(job, params=dict(job.params)) for job in jobs])
    lines = ["| card | model jobs, one at a time (GPU-hours) | range | CPU-side work beside them (CPU-hours) |",
             "|---|---|---|---|"]
    for card in args.cards:
        hours = {}
        for name, point in RANGE.items():
            calibration = assumed_calibration(card, rates, point["utilisation"], geometry, point["launch_us"])
            seconds = [estimate.price(job, lengths, calibration).seconds for job in priced_jobs]
            hours[name] = sum(s for job, s in zip(priced_jobs, seconds) if job.rule in estimate.MODEL_RULES) / 3600
            hours[f"{name} cpu"] = sum(s for job, s in zip(priced_jobs, seconds) if job.rule not in estimate.MODEL_RULES) / 3600
        lines.append(f"| {CARDS[card]['device']} | {hours['assumed']:,.1f} | {hours['fast']:,.1f}-{hours['slow']:,.1f} "
                     f"| {hours['assumed cpu']:,.1f} |")
    points = "; ".join(f"{name} {point['utilisation']:.0%} and {point['launch_us']:g} us" for name, point in RANGE.items())
    counted = ", ".join(f"{kind} {kernels(kind, geometry.layers):,.0f}" for kind in KERNELS)
    return ("On GPUs, from assumptions, not measurements (tools/calibrate.py: data-sheet dense peaks at a share of them "
            f"and a launch floor of each pass's kernels, counted on the CPU by torch's profiler ({counted} a pass), at a "
            f"cost per kernel; {points}; attention by memory bandwidth; 20 s start-up per model job), the cost model of "
            f"tools/estimate_runtime.py for a {geometry}, CPU-side rates "
            f"{Path(rates).name if rates else 'none (those rules unpriced)'}:\n"
            + "\n".join(lines))


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
