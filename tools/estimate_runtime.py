"""Estimate what a config costs on a calibrated device, job by job, before running it; with ``--benchmarks``, set the
estimate beside what a finished run measured.

    make calibrate CALIBRATION_CONFIGS=configs/cpu.yaml                 # once per device and model geometry
    python tools/estimate_runtime.py --configfile configs/cpu.yaml --calibration results/calibration/minilm-l6-float32.json \
        [--benchmarks results/benchmarks] [--jobs 2]

The jobs are those of a dry run of the whole workflow (``snakemake -n --forceall`` with the same config files), each
with its own params and resources; the token lengths come from the data the run would prepare (``prepare_data``'s own
function on its own params), tokenised with the model's tokenizer; each job is priced by
:mod:`bertology_core.cost.estimate` with the calibration's pass costs. ``--stand-in QQP:train=MRPC:train`` prices a
split that is not on this machine with another split's lengths, at the size GLUE publishes (printed as an assumption).
The whole run's wall time is the sum of the jobs over ``--jobs`` (jobs at a time), a lower bound where the DAG's
order leaves cores idle.

With ``--benchmarks``, ``--measure`` says what the run measured is: ``s``, a job's wall seconds (Snakemake's benchmark
file: waiting for a core included), ``cpu_time`` (Snakemake's sampled CPU seconds, which miss up to the last 30 s of
a job), or ``cpu``, the CPU seconds each job's process recorded in its log as it exited
(:mod:`bertology_core.workflow.job_record`): what the calibration prices, a job's work on one thread.

Rules that run no timed model pass (probes, the pattern CNN, scores over attention maps) run on the CPU whatever the
accelerator; their rates come from a finished run on the CPU that will run them (any config), fitted once:

    python tools/estimate_runtime.py --configfile configs/cpu.yaml --calibration results/calibration/minilm-l6-float32.json \
        --benchmarks <finished run>/results/benchmarks --fit-stages results/calibration/minilm-l6-float32-stages.json
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import io
import sys
from collections import defaultdict
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bertology_core.data import tasks, states, treebank  # noqa: E402
from bertology_core.data.word_pieces import as_in_running_text  # noqa: E402
from bertology_core.cost import estimate  # noqa: E402
from bertology_core.workflow import code_imports, configuration, job_record  # noqa: E402
from bertology_core.models import compatibility  # noqa: E402
from bertology_core.patterns import label_tables  # noqa: E402
from bertology_core.cost.model import Calibration, Geometry  # noqa: E402

# rules that read an attention dump: priced by its examples' lengths
DUMP_READERS = ("pattern_features", "classify_maps", "linguistic_scores", "head_roles", "attention_change")
# GLUE's published split sizes, for a stand-in split (train, dev)
GLUE_SIZES = {"CoLA": (8551, 1043), "SST-2": (67349, 872), "MRPC": (3668, 408), "STS-B": (5749, 1500), "QQP": (363846, 40430),
              "MNLI": (392702, 9815), "QNLI": (104743, 5463), "RTE": (2490, 277), "WNLI": (635, 71)}


@functools.cache
def _imports_torch(script: Path) -> bool:
    return "torch" in code_imports.third_party_imports(script, ROOT)


def dry_run_jobs(configfiles: list[str], directory: Path = ROOT) -> list[estimate.Job]:
    """Every job of the workflow under ``configfiles`` (a forced dry run in ``directory``: a run's folder), with its
    params and resources."""
    from snakemake import jobs
    from snakemake.cli import main

    captured: list[estimate.Job] = []
    original = jobs.Job.log_info

    def log_info(self, *args, **kwargs):
        resources = {k: v for k, v in self.resources.items() if not k.startswith("_")}
        named = {name: str(value) if isinstance(value, str) else [str(f) for f in value] for name, value in self.input.items()}
        script = ROOT / "workflow_scripts" / Path(str(self.rule.script)).name if self.rule.script else None
        captured.append(estimate.Job(self.rule.name, dict(self.wildcards_dict), dict(self.params.items()), resources,
                                     self.threads, str(self.benchmark) if self.benchmark else None,
                                     tuple(str(f) for f in self.input), named, str(self.log[0]) if self.log else None,
                                     script is not None and _imports_torch(script), tuple(str(f) for f in self.output),
                                     {name: str(f) for name, f in self.output.items()},
                                     self.rule.name in self.dag.workflow._localrules or self.rule.norun))
        return original(self, *args, **kwargs)

    jobs.Job.log_info = log_info
    sink = io.StringIO()
    try:
        with redirect_stdout(sink), redirect_stderr(sink):
            main(["-n", "--forceall", "--rerun-incomplete", "--cores", "1", "--directory", str(directory), "--snakefile", str(ROOT / "Snakefile"),
                  "--configfile", *configfiles])
    except SystemExit as done:
        if done.code:
            raise SystemExit(f"the dry run failed:\n{sink.getvalue()[-3000:]}") from None
    finally:
        jobs.Job.log_info = original
    return captured


def experiment_of(configfiles: list[str]):
    """The experiment of ``configfiles`` over config.yaml, as the workflow builds it."""
    from bertology_core.workflow import jobs as job_table

    config = configuration.validated([ROOT / "config.yaml", *configfiles], ROOT / "schemas" / "config.schema.yaml")
    return job_table.experiment(config, ROOT)


def rule_passes(configfiles: list[str]):
    """The most times a job (rule, wildcards) may go over what it reads under ``configfiles`` (the stages' ``passes``)."""
    from bertology_core.workflow import jobs as job_table

    return job_table.passes(experiment_of(configfiles))


def token_lengths(jobs: list[estimate.Job], tokenizer_folder: str, stand_ins: dict[tuple[str, str], tuple[str, str]],
                  local_glue: str | None = None) -> estimate.Lengths:
    """Lengths of every split the dry run prepares (untruncated word pieces), and of each stand-in's split."""
    from bertology_core.models import loading

    tokenizer = loading.load_tokenizer(tokenizer_folder)
    frames = {}
    for job in jobs:
        if job.rule == "prepare_treebank":  # probing's sentences: their words' pieces, in treebank order
            frame = treebank.read_conllu(ROOT / job.inputs[0], job.params["max_sentences"])
            ids = tokenizer([as_in_running_text(words) for words in frame["forms"].to_list()], is_split_into_words=True,
                            truncation=False)["input_ids"]
            frames[("treebank", job.wildcards["split"])] = pl.DataFrame({"idx": frame["sentence"], "length": [len(r) for r in ids]})
            frames[(estimate.TREEBANK_WORDS, job.wildcards["split"])] = pl.DataFrame(
                {"idx": frame["sentence"], "length": frame["forms"].list.len()})
            continue
        if job.rule != "prepare_data":
            continue
        task, split = job.wildcards["task"], job.wildcards["split"]
        key = (task, split)
        if key in stand_ins:
            continue
        # as prepare_data finds its files: its inputs, one per split
        declared = tasks.declare(task, job.params["task"]["declaration"], ROOT)
        source = declared.files or declared.hub
        if isinstance(source, tasks.Files):
            source = source.at({name: ROOT / path for name, path in zip(source.splits, job.inputs, strict=True)})
        shipped = tasks.shipped_declarations().get(task)
        if local_glue and shipped is not None and all(job.params["task"]["declaration"][k] == shipped.get(k)
                                                      for k in job.params["task"]["declaration"] if k != "hub"):
            declared = tasks.glue_task(task, local_glue)
            source = declared.files
        frame = tasks.prepare_split(declared, split, source, job.params["max_examples"], job.params["seed"])
        frames[key] = _lengths(frame, tokenizer)
    for (task, split), (other_task, other_split) in stand_ins.items():
        source = frames.get((other_task, other_split))
        if source is None:
            raise SystemExit(f"--stand-in {task}:{split}={other_task}:{other_split}: the run prepares no {other_task} {other_split}")
        if task not in GLUE_SIZES:
            raise SystemExit(f"--stand-in {task}:{split}: {task} is not a GLUE task whose size is known here "
                             f"({', '.join(GLUE_SIZES)}); prepare its data on this machine instead")
        size = GLUE_SIZES[task][0 if split == "train" else 1]
        drawn = np.random.default_rng(0).choice(source["length"].to_numpy(), size=size, replace=True)
        frames[(task, split)] = pl.DataFrame({"idx": np.arange(size), "length": drawn})
        print(f"assumption: {task} {split} ({size} examples, GLUE's count) has the lengths of {other_task} {other_split}")
    return estimate.Lengths(frames)


def _lengths(frame: pl.DataFrame, tokenizer) -> pl.DataFrame:
    first, second = tasks.sentence_texts(frame)
    ids = tokenizer(first, second, truncation=False, padding=False, return_attention_mask=False,
                    return_token_type_ids=False)["input_ids"]
    return pl.DataFrame({"idx": frame["idx"], "length": [len(row) for row in ids]})


def finished(job: estimate.Job, run: Path) -> bool:
    """Whether ``job`` finished in the run at ``run``: Snakemake writes a job's benchmark file only when it succeeded
    (a job without one: its outputs exist). The record of a job that failed or still runs is not the job's."""
    return (run / job.benchmark).exists() if job.benchmark else all((run / output).exists() for output in job.outputs)


def measured_seconds(job: estimate.Job, run: Path, measure: str = "s") -> float | None:
    """What a finished run (its folder ``run``) measured of ``job``: its Snakemake benchmark file's ``s`` (wall) or
    ``cpu_time`` (sampled: it misses up to the last 30 s of a job), or ``cpu`` (the CPU seconds the job's process
    wrote to its log as it exited, :mod:`bertology_core.workflow.job_record`)."""
    if measure == "cpu":
        if not job.log or not finished(job, run):
            return None
        record = job_record.read(run / job.log)
        return None if record is None else float(record["cpu_seconds"])
    path = run / job.benchmark if job.benchmark else None
    if path is None or not path.exists():
        return None
    with path.open() as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return float(rows[-1][measure]) if rows and rows[-1][measure] not in ("", "NA") else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", nargs="+", required=True)
    parser.add_argument("--calibration", required=True)
    parser.add_argument("--tokenizer", help="the model's folder (default: the config's first model, where it is a folder or package)")
    parser.add_argument("--stand-in", action="append", default=[], metavar="TASK:SPLIT=TASK:SPLIT")
    parser.add_argument("--local-glue", help="read GLUE's tasks from this folder (classic layout) whatever data.source says")
    parser.add_argument("--benchmarks", help="a finished run's results/benchmarks folder, to compare with")
    parser.add_argument("--measure", choices=("s", "cpu_time", "cpu"), default="s", help="with --benchmarks: compare "
                        "with (and fit on) the jobs' wall seconds (s), the CPU seconds Snakemake sampled (cpu_time: it "
                        "misses up to a job's last 30 s), or the CPU seconds each job's process recorded in its log as it "
                        "exited (cpu: what a job computed, without the time it waited for a core)")
    parser.add_argument("--per-job", metavar="RULE", action="append", default=[], help="also list this rule's jobs one by one")
    parser.add_argument("--jobs", type=int, default=1, help="jobs at a time (the run's --cores over a job's threads)")
    parser.add_argument("--fit-stages", metavar="OUT", help="with --benchmarks: write the calibration with the rates of the "
                        "rules that run no timed pass (estimate.STAGE_WORK) fitted on that run, to OUT")
    parser.add_argument("--stages", metavar="FILE", help="the fitted rates of FILE (written by --fit-stages, e.g. on a "
                        "float32 run) with the pass costs of --calibration")
    parser.add_argument("--cross-fit", action="store_true", help="with --benchmarks: price each job with rates fitted on "
                        "that run's jobs of the other tasks (on the other jobs of its rate key where all are of one task; "
                        "from --stages, fitted on another run, where it is its key's one job): the estimate validated on "
                        "the run without having seen the job. A job resumed from a checkpoint measured its last attempt "
                        "alone: fit on runs without one")
    args = parser.parse_args()
    if (args.fit_stages or args.cross_fit) and not args.benchmarks:
        parser.error("--fit-stages and --cross-fit need --benchmarks (the finished run to fit on)")
    calibration = Calibration.read(args.calibration)
    if args.stages:
        calibration = dataclasses.replace(calibration, stages=Calibration.read(args.stages).stages)
    stand_ins = {}
    for item in args.stand_in:
        left, right = item.split("=")
        stand_ins[tuple(left.split(":"))] = tuple(right.split(":"))
    jobs = dry_run_jobs(args.configfile)
    tokenizer = args.tokenizer or _model_folder(args.configfile)
    if args.tokenizer:
        print(f"assumption: the model is a {calibration.geometry} (the calibration's) with the tokenizer of {args.tokenizer}")
    else:
        geometry = Geometry.from_config(compatibility.read_config(Path(tokenizer)))
        if geometry != calibration.geometry:
            raise SystemExit(f"{args.calibration} times a {calibration.geometry}, the config's model is a {geometry}. "
                             "Fix: calibrate that model (tools/calibrate.py --configfile ...)")
    lengths = token_lengths(jobs, tokenizer, stand_ins, args.local_glue)
    per_rule: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0, 0.0])  # jobs, estimate, measured, jobs measured, their estimate
    measured_jobs: list[tuple[estimate.Job, float]] = []
    notes: dict[str, set[str]] = defaultdict(set)
    for_pricing(jobs)
    cross_fitted = _cross_fitted(jobs, args, lengths, calibration) if args.cross_fit else {}
    for job in jobs:
        priced = estimate.price(job, lengths, cross_fitted.get(id(job), calibration))
        measured = measured_seconds(job, Path(args.benchmarks).parent.parent, args.measure) if args.benchmarks else None
        if job.rule in args.per_job:
            parts = ", ".join(f"{k} {v:.1f}" for k, v in priced.parts.items())
            print(f"{job.rule} {'/'.join(job.wildcards.values())}: {priced.seconds:.1f} s ({parts})"
                  + (f"; measured {measured:.1f} s" if measured is not None else ""))
        row = per_rule[job.rule]
        row[0] += 1
        row[1] += priced.seconds
        notes[job.rule].add(priced.note)
        if measured is not None:
            row[2] += measured
            row[3] += 1
            row[4] += priced.seconds
            measured_jobs.append((job, measured))
    print(f"calibration: {calibration.device}, {calibration.threads} thread(s), timed {calibration.jobs} job(s) at a time, precision {calibration.precision}, "
          f"geometry {calibration.geometry}")
    header = "| rule | jobs | estimate (s) |" + (" measured (s) | estimate / measured |" if args.benchmarks else "") + " note |"
    print(header)
    print("|---|---|---|" + ("---|---|" if args.benchmarks else "") + "---|")
    total_estimate = total_measured = estimate_of_measured = 0.0
    for rule, (count, predicted, measured, found, predicted_found) in sorted(per_rule.items(), key=lambda kv: -kv[1][1]):
        total_estimate += predicted
        total_measured += measured
        estimate_of_measured += predicted_found
        extra = ""
        if args.benchmarks:  # the ratio over the rule's measured jobs only
            ratio = f"{predicted_found / measured:.2f}" if found and measured > 0 else ""
            extra = f" {measured:.0f}{'' if found == count else f' ({found} of {count} jobs)'} | {ratio} |"
        print(f"| {rule} | {count} | {predicted:.0f} |{extra} {'; '.join(sorted(n for n in notes[rule] if n))} |")
    print(f"\nall jobs: {total_estimate:.0f} s of job time; over {args.jobs} at a time: {total_estimate / args.jobs / 60:.1f} min")
    if args.benchmarks:
        found, count = sum(row[3] for row in per_rule.values()), sum(row[0] for row in per_rule.values())
        if not found:
            raise SystemExit(f"{args.benchmarks}: no job of this config measured by --measure {args.measure}"
                             + (" (its logs hold no job record: a run made before jobs wrote them?)" if args.measure == "cpu" else ""))
        print(f"measured: {found} of {count} jobs, {total_measured:.0f} s of job time; their estimate / measured "
              f"{estimate_of_measured / total_measured:.2f}")
        long = {rule: row[4] / row[2] for rule, row in per_rule.items() if row[3] == row[0] and row[2] > 60}  # measured whole
        worst = max(long, key=lambda rule: abs(long[rule] - 1), default=None)
        if worst:
            print(f"rules measured above 60 s: {len(long)}; within 25%: {sum(abs(r - 1) <= 0.25 for r in long.values())}; "
                  f"furthest: {worst} at {long[worst]:.2f}")
    if args.fit_stages:
        source = f"{args.benchmarks} ({', '.join(args.configfile)})"
        stages = estimate.fit_stage_rates(measured_jobs, lengths, calibration, source)
        out = Path(args.fit_stages)
        out.write_text(dataclasses.replace(calibration, stages=stages).to_json())
        print(f"{out}: {args.calibration} with the rates of {', '.join(sorted(stages))} fitted on {source}")


def for_pricing(jobs: list[estimate.Job]) -> list[estimate.Job]:
    """``jobs`` (a dry run's) with what pricing a job reads from another job: a greedy search's sweep's examples, a
    dump reader's dump's, the pattern CNN's hand-labelled maps (in place; returned)."""
    sweeps = {tuple(sorted(j.wildcards.items())): j for j in jobs if j.rule == "disabling_sweep"}
    dumps = {(j.wildcards["model"], j.wildcards["task"], j.wildcards["dumped"]): j for j in jobs if j.rule == "dump_attention"}
    for job in jobs:
        if job.rule == "disabling_greedy":  # the greedy search runs on its sweep's examples
            sweep = sweeps[tuple(sorted(job.wildcards.items()))]
            job.params.update(max_examples=sweep.params["max_examples"], subsample_seed=sweep.params["subsample_seed"])
        if job.rule in DUMP_READERS:  # the maps of their dump (attention change: two of the same examples)
            dumped = job.wildcards.get("dumped", states.PRETRAINED)
            job.params["dump_params"] = dumps[(job.wildcards["model"], job.wildcards["task"], dumped)].params
        if job.rule == "pattern_classifier" and "labels" in job.named_inputs:  # the CNN trains on the hand labels
            job.params["training_maps"] = _hand_labelled_maps(ROOT / job.named_inputs["labels"], job.params["labelled_keys"])
    return jobs


def _hand_labelled_maps(labels: Path, labelled_keys: list[str]) -> int:
    """The hand-labelled maps of ``labels`` (a label file, read as the CNN's training reads it) in the run's labelled
    dumps: what the CNN trains on (unless the card's recipe check leaves them out, when it trains on rule labels)."""
    frame = label_tables.read_labels(labels)
    return int(frame.filter((pl.col("task") + "/" + pl.col("state")).is_in(labelled_keys)).height)


def _task_of(job: estimate.Job, tasks: set[str]) -> str | None:
    """The task a job is of: a ``task`` wildcard, or a wildcard's first segment (``probed``: ``MRPC/finetuned/seed1``)."""
    for value in job.wildcards.values():
        if value.split("/")[0] in tasks:
            return value.split("/")[0]
    return None


def _cross_fitted(jobs: list[estimate.Job], args, lengths: estimate.Lengths, calibration: Calibration) -> dict[int, Calibration]:
    """Per measured job (by ``id``), the calibration with rates fitted without it (estimate.cross_fitted_rates): on the
    other tasks' jobs; where those hold none of its key, on its key's other jobs; where it is its key's one job, the
    rates of ``--stages`` (another run)."""
    measured = [(job, seconds) for job in jobs
                if (seconds := measured_seconds(job, Path(args.benchmarks).parent.parent, args.measure)) is not None]
    tasks = {job.wildcards["task"] for job in jobs if job.rule == "prepare_data"}
    run = Path(args.benchmarks).resolve()
    # rates of --stages fitted on this very run would have seen the job
    other_run = {key: rate for key, rate in calibration.stages.items() if Path(rate["from"].split(" ")[0]).resolve() != run}
    terms = estimate.fit_terms(measured, lengths, calibration)
    by_task = estimate.cross_fitted_rates(measured, lengths, calibration, args.benchmarks,
                                          lambda job: _task_of(job, tasks) or str(job.benchmark or job.log),
                                          "the job's task (the job itself where it has none)", terms)
    by_job = estimate.cross_fitted_rates(measured, lengths, calibration, args.benchmarks, lambda job: str(job.benchmark or job.log),
                                         "the job itself", terms)
    return {id(job): dataclasses.replace(calibration, stages={**other_run, **own, **other})
            for (job, _), other, own in zip(measured, by_task, by_job)}


def _model_folder(configfiles: list[str]) -> str:
    spec = configuration.merged([ROOT / "config.yaml", *configfiles])["models"][0]["spec"]
    folder = compatibility.local_folder(spec, ROOT)
    if folder is None:
        raise SystemExit(f"the model {spec} is a Hub id: pass --tokenizer with a folder holding its tokenizer")
    return str(folder)


if __name__ == "__main__":
    main()
