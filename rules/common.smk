# What every stage needs: the validated config, its experiment (bertology_core/workflow/jobs.py: every stage's
# declaration, bertology_core/<stage>/stage.py, bound to it), the checks of the config and of the input files it names
# (before any job), the wildcard constraints, and the few helpers that need Snakemake. Rule files define no function:
# their inputs and params look things up in EXPERIMENT (what the config decides by itself; a stage is
# EXPERIMENT.<stage>) and in jobs() (what runs under the fitness verdicts).
import functools
import hashlib
import math
import os
import re
from pathlib import Path

import polars as pl
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate

from bertology_core.data import states
from bertology_core.models import compatibility
from bertology_core.workflow import checks, code_imports, configuration, jobs as job_table
from bertology_core.summaries.files import FIGURE_FILES, TABLE_FILES
from bertology_core.head_roles.stage import GATE_DIR
from bertology_core.jobs import needs, submissions
from bertology_core.jobs.experiment import FITNESS_TABLE, TREEBANK_DOWNLOADED
from bertology_core.patterns.stage import label_files
from bertology_core.pruning.stage import PRUNE_DIR

_SCHEMA = yaml.safe_load((Path(workflow.basedir) / "schemas" / "config.schema.yaml").read_text())
# a number written as text ("32", or 2e-5, which YAML 1.1 reads as text) is read as the number the schema asks for
_written = {key: value for key, value in configuration.flatten(config).items() if isinstance(value, str)}
for _key in configuration.numbers_from_strings(config, _SCHEMA):
    if workflow.is_main_process:
        logger.warning(configuration.number_warning(_key, _written.get(_key, "?"), configuration.flatten(config)[_key]))
# the key, the value and what is allowed first (Snakemake's validate leads with a dump of the schema); then
# Snakemake's validate, which also fills in the schema's defaults
if problems := configuration.schema_problems(config, _SCHEMA):
    raise WorkflowError("config does not fit schemas/config.schema.yaml:\n  " + "\n  ".join(problems))
validate(config, schema="../schemas/config.schema.yaml")

REPO = Path(workflow.basedir)
# every stage's declaration bound to the config, computed once
EXPERIMENT = job_table.experiment(config, REPO)
# Every check of the config and of the input files it names, in order, before the DAG is built
# (bertology_core/workflow/checks.py): the first kind that finds problems stops the run, naming each problem and the
# fix. The files' contents (about a second for the CPU profile) only in the main process, as a cluster job parses the
# workflow again and need not reread the data.
CHECKS = checks.ParseChecks(EXPERIMENT, main_process=workflow.is_main_process)
if _error := CHECKS.first_error():
    raise WorkflowError(_error)
# a Hub dataset that cannot be reached: a warning when the workflow is parsed (a dry run needs no data, and Snakemake
# does not tell a Snakefile whether it is one), an error before the first job of a real run (onstart)
_HUB_PROBLEMS = CHECKS.warnings()
for _warning in _HUB_PROBLEMS + CHECKS.label_warnings() + (job_table.warnings(EXPERIMENT) if workflow.is_main_process else []):
    logger.warning(_warning)


# A job on a cluster's node parses the workflow again (Snakemake's remote mode): there it reads what the host fetched
# (check_model and resolve_model, local rules, fetch the models into model_cache; prepare_data and download_treebank,
# local too, the data) and never reaches for the network, which a compute node often lacks
if not workflow.is_main_process:
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")


# the Hub cache the model fetch writes (a relative path from this repository, as the config's other paths)
MODEL_CACHE = None if config["model_cache"] is None else str(REPO / Path(config["model_cache"]).expanduser())


# each rule's memory, time and disk from the sizes of what its jobs read, with the config's memory overrides and the
# passes its stage's settings make (a probe's epochs)
REQUESTS = needs.Requests(needs.load(), config["compute"]["mem_mb"], job_table.passes(EXPERIMENT))
# each model's resolved.json as the parameters of the spec it resolves, for the plan of a run before it is resolved
MODEL_PARAMETERS = (needs.model_parameters(EXPERIMENT.models, REPO, MODEL_CACHE, EXPERIMENT.given_runs())
                    if workflow.is_main_process else {})


onstart:
    if _HUB_PROBLEMS:
        raise WorkflowError("Bad input data (nothing was run):\n" + "\n".join(_HUB_PROBLEMS))
    # a target of a stage the config's stages leave out (its summary named on the command line) has no runs to read
    _left_out = sorted({Path(job.rule.snakefile).stem for job in workflow.dag.needrun_jobs()} & set(EXPERIMENT.left_out()))
    if _left_out:
        raise WorkflowError(f"The targets ask for {', '.join(_left_out)}, which the config's stages "
                            f"{config['stages']} leave out (nothing was run). Fix: add {', '.join(_left_out)} to stages, or "
                            "ask for a target of a stage it runs.")
    # what the jobs about to run will need (printed), and their disk with the training checkpoints held at once
    # against the free space
    _jobs = [planned_job(job) for level in workflow.dag.toposorted(set(workflow.dag.needrun_jobs())) for job in level]
    _plan = needs.plan(_jobs, REQUESTS.needs, Path.cwd(), config["compute"]["mem_mb"], MODEL_PARAMETERS, REQUESTS.passes)
    _at_once = min(n for n in (workflow.nodes, workflow._cores, len(_jobs)) if n) or 1
    logger.info(f"What this run will need (bertology_core/jobs/needs.py):\n{_plan.summary(_at_once, needs.free_mb(Path.cwd()))}")
    if _unsized := needs.unsized_models({path: value for path, value in MODEL_PARAMETERS.items() if not Path(path).exists()}):
        logger.warning(_unsized)
    _problem = needs.disk_problem(_plan.needed_mb(_at_once), Path.cwd(), "--config compute='{check_disk: false}'")
    if _problem and config["compute"]["check_disk"]:
        raise WorkflowError(f"Not enough disk (nothing was run): {_problem}")
    if _problem:
        logger.warning(f"Going on (compute.check_disk: false) although {_problem}")
MODEL_JOB_GPUS = config["compute"]["gpus"]


wildcard_constraints:
    model="|".join(re.escape(m) for m in EXPERIMENT.models),
    task="|".join(re.escape(t) for t in EXPERIMENT.declared),
    split="|".join(sorted({re.escape(s) for task in EXPERIMENT.declared.values() for s in task.splits})),
    seed=r"\d+",
    # a fine-tuning run's state, an attention dump's state (trained ones per seed), a probed state
    state="|".join(states.FINE_TUNING),
    dumped=states.DUMPED_PATTERN,
    probed="|".join((states.PRETRAINED, states.RANDOM_WEIGHTS)) + "|(?:" + "|".join(re.escape(t) for t in EXPERIMENT.declared)
    + rf")/{states.FINETUNED}/seed\d+",


# a model's runs that a given classifier fills (models[].finetuned) and those fine-tuning makes, told apart by
# the model wildcard looking ahead at the rest of the run's path: <model>/<task>/finetuned/seed<N>/
_GIVEN = EXPERIMENT.given_pattern()
GIVEN = f"(?=(?:{_GIVEN}))[^/]+" if _GIVEN else "(?!)"
NOT_GIVEN = f"(?!(?:{_GIVEN}))[^/]+" if _GIVEN else "[^/]+"


# --- the runs under the fitness verdicts -------------------------------------------------------------------------


def jobs():
    """What runs under the fitness verdicts (bertology_core.workflow.jobs.Jobs). Where no verdict decides anything
    (fitness.if_unfit warn, or no analysis of a model fine-tuned from the pre-trained encoder): what the config runs
    were every model fit. Under skip and fail: the runs under the fitness checkpoint's table, so an input function
    that calls this waits for the checkpoint, and Snakemake asks it again once the table is written."""
    if not EXPERIMENT.needs_verdicts:
        return EXPERIMENT.every_model_fit
    path = Path(checkpoints.fitness_table.get().output[0])
    return _jobs_under(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=1)
def _jobs_under(path, modified):
    """The runs under the verdicts of the fitness table at ``path``, read once per version of it (``modified``)."""
    table = pl.read_parquet(path).select("model", "task", "state", "seed", "fit")
    return EXPERIMENT.jobs({(m, t, i, int(s)): bool(f) for m, t, i, s, f in table.iter_rows()})


# --- what a rule declares ----------------------------------------------------------------------------------------


def script_code(script):
    """Hash of the library code a workflow script runs: every bertology_core module and script helper it
    imports, followed through their own imports (:func:`bertology_core.workflow.code_imports.reached_modules`). Passed
    as a param (``code=``).

    Snakemake tracks a job's script but not the library the script imports; without this hash a fix in
    the library would not rerun the jobs it changes. The imports are read from the source, so the hash
    cannot miss a module a hand-kept list forgot."""
    digest = hashlib.sha256()
    for module in sorted(code_imports.reached_modules(REPO / "workflow_scripts" / f"{script}.py", REPO)):
        digest.update(module.relative_to(REPO).as_posix().encode())
        digest.update(module.read_bytes())
    return digest.hexdigest()[:16]


def planned_job(job):
    """A job of the DAG as the plan reads it (bertology_core/jobs/needs.py)."""
    return needs.PlannedJob.of(job.rule.name, job.input, job.output, job.threads, job.wildcards_dict,
                               dict(job.params.items()), dict(job.output.items()), job.resources.get("runtime"),
                               dict(job.input.items()))


# the job group of the short model jobs' submissions: a profile that sets group-components for it (profiles/slurm)
# turns the packing on; its value caps the pieces of the DAG one submission takes
SUBMISSION_GROUP = "short_model_jobs"
_PLACED = {}  # job key -> bin (None: alone), from the first packing that saw the job


def grouping():
    """Whether this run packs short model jobs into submissions (asked once the DAG is being built: Snakemake sets the
    group settings after it has parsed the workflow). Only the submitting process packs (:func:`submission_group`)."""
    return SUBMISSION_GROUP in workflow.group_settings.group_components and config["compute"]["submission_minutes"] > 0


def _place_submissions():
    """Pack the short model jobs of the DAG's jobs still to run that no packing placed yet
    (bertology_core/jobs/submissions.py), by the runtime each asks for as the plan gives it before its inputs exist."""
    levels = workflow.dag.toposorted(set(workflow.dag.needrun_jobs()))
    jobs = [job for level in levels for job in level]
    planned = needs.plan([planned_job(job) for job in jobs], REQUESTS.needs, Path.cwd(), config["compute"]["mem_mb"],
                         MODEL_PARAMETERS, REQUESTS.passes)
    keys = {job: submissions.key(job.rule.name, job.wildcards_dict) for job in jobs}
    parents = {keys[job]: {keys[parent] for parent in workflow.dag.dependencies[job] if parent in keys} for job in jobs}
    pieces = [found for job, row in zip(jobs, planned.rows) if keys[job] not in _PLACED
              and (found := submissions.piece(job.rule.name, job.wildcards_dict, row.minutes)) is not None]
    # a task whose examples no file gives yet (a Hub dataset before prepare_data): its jobs go alone (prepare the
    # data first, snakemake --until prepare_data, and the run packs them)
    tasks = {piece.task for piece in pieces}
    sized = submissions.sized_tasks(tasks, lambda task: EXPERIMENT.source_rows(task, "train"))
    first = 1 + max((index for index in _PLACED.values() if index is not None), default=-1)
    for piece_key, index in submissions.pack(pieces, config["compute"]["submission_minutes"], parents, sized).items():
        _PLACED[piece_key] = None if index is None else first + index


def submission_group(rule):
    """A short model rule's ``group:``: where the run packs (:func:`grouping`), its job's bin, as a job group whose
    pieces the profile's group-components for SUBMISSION_GROUP join into one submission; else none (a local run)."""
    def group(wildcards):
        if not grouping() or not workflow.is_main_process:  # a job on a node runs the jobs it was given
            return None
        piece_key = submissions.key(rule, dict(wildcards.items()))
        if piece_key not in _PLACED:
            _place_submissions()
        # a job no packing saw is one that does not run (Snakemake asks finished ones too): it stays ungrouped
        index = _PLACED.setdefault(piece_key, None)
        if index is None:
            return None
        groupid = f"{SUBMISSION_GROUP}{index}"
        # what Snakemake records for a group named by a pattern, so that the pattern's group-components apply to it
        workflow.parent_groupids[groupid] = SUBMISSION_GROUP
        return groupid
    return group


def after_fitness_when_grouped(rule):
    """Where this run packs ``rule``'s jobs into shared submissions (:func:`grouping`): the fitness table,
    as one more input, so that no grouped job starts before the fitness checkpoint is done. (An input function for
    unpack; nothing where the rule is not grouped, so a local run's DAG is unchanged.)

    When a checkpoint finishes, Snakemake 9 forms the job groups again and merges the new pieces into the group
    objects it already holds, a running one included; that group's hash changes, and when it finishes the scheduler
    no longer finds it among the running jobs (KeyError in JobScheduler's postprocess; the groups-with-checkpoints
    bugs snakemake/snakemake#2151 and #823). With the fitness table the workflow's only checkpoint and every grouped
    job after it, the groups are formed again while none of them has started. The fitness table is a target of
    every default run, so this adds no work; it makes the short jobs of the pre-trained encoder wait for the
    fine-tuning, which on a cluster costs minutes of wall time and no GPU time."""
    # asked when the DAG is built: Snakemake sets the groups after it has parsed the workflow
    return lambda wildcards: (
        {"after_fitness": f"{FITNESS_TABLE}{TABLE_FILES[0]}"} if rule in submissions.RULES and grouping() else {}
    )


def model_device(rule, hyperparameters=None):
    """A model rule's device resources: ``gpu``, compute.gpus GPUs (the Slurm plugin's ``--gpus``; profiles/gpu's slots),
    or where the site asks for GPUs as a generic resource (compute.gpu_request: gres) ``gres`` ``gpu:N`` instead; and
    ``gpu_mem_mb``, what its job holds on the GPU by the same memory line as its ``mem_mb`` (Requests.device_memory).
    Where a profile sets that resource (profiles/gpu: the card's memory) Snakemake runs model jobs side by side while
    their sum fits; elsewhere it only names the need. ``hyperparameters``: a training rule's (its batch)."""
    device = REQUESTS.device_memory(rule, hyperparameters)

    def gpu_mem_mb(wildcards, input):
        # at most the card (a profile's gpu_mem_mb): Snakemake refuses a job that asks for more than there is; it runs alone
        card = workflow.global_resources.get("gpu_mem_mb")
        card = getattr(card, "value", card)  # Snakemake 9 holds a Resource
        return min(device(wildcards, input), card if isinstance(card, int) else math.inf)

    # every model job sizes its scoring passes on a GPU by the same rule (bertology_core.scoring.plans.rows_per_pass)
    found = {"gpu_mem_mb": gpu_mem_mb, "gpu_rows_per_pass": config["compute"]["gpu_rows_per_pass"],
             "gpu_gradient_rows_per_pass": config["compute"]["gpu_gradient_rows_per_pass"]}
    if config["compute"]["gpu_request"] == "gres" and MODEL_JOB_GPUS:
        found["gres"] = f"gpu:{MODEL_JOB_GPUS}"
    else:
        found["gpu"] = MODEL_JOB_GPUS
    return found


def requests(rule, runtime=True, hyperparameters=None):
    """The rule's ``mem_mb``, ``disk_mb`` and (unless it sizes its time otherwise: the training rules) ``runtime``, from
    the sizes of what each job reads (bertology_core/jobs/needs.py; ``compute.mem_mb[rule]`` overrides the memory),
    growing with the attempt so that a job retried after running out of memory or time (profiles/slurm sets retries)
    asks for more. ``hyperparameters``: a training rule's, from the wildcards, as its params give them (the batch)."""
    return REQUESTS.resources(rule, runtime, hyperparameters)


def dump_file(path):
    """Attention dumps are temp() unless attention.keep_dumps: deleted once every analysis read them."""
    return path if config["attention"]["keep_dumps"] else temp(path)


def report_file(section, path, kind):
    """``path`` (a table's CSV or a figure's PNG) registered with Snakemake's report (``snakemake --report``),
    captioned by the section's text (report/sections/<section>.rst)."""
    return report(path, caption=str(REPO / "report" / "sections" / f"{section}.rst"), category=section, subcategory="{model}",
                  labels={"model": "{model}", kind: Path(path).stem})


def summary_outputs(section, stem):
    """The outputs of the summary of ``section`` at ``stem`` (results/..., as its stage's section declares it)
    for a rule's ``output:`` (``**summary_outputs(...)``), named as the table names them: the files of a table
    (figures.write_table) and/or a figure (figures.save_chart), each written once: the report page reads a table's
    Parquet and a figure's Vega-Lite spec, and each table's CSV and each figure's PNG is registered with Snakemake's
    report (``snakemake --report``)."""
    written = job_table.summary(EXPERIMENT, section, stem.removeprefix("results/"))
    registered = {"table": ".csv", "figure": ".png"}
    kept = [ext for kind in written.files for ext in (TABLE_FILES if kind == "table" else FIGURE_FILES) if ext != registered[kind]]
    outputs = {written.name: multiext(stem, *kept)}
    outputs.update({f"{written.name}_{kind}_report": report_file(section, stem + registered[kind], kind) for kind in written.files})
    return outputs


# --- the input files the config names (checked before any job: CHECKS) ------------------------------------------


def model_files(model):
    """resolve_model's inputs: a folder's config and weights (replacing its weights reruns what used them); for a Hub
    id, the verdict of check_model, ancient(); re-checking it for a changed config never reruns the model's jobs."""
    if EXPERIMENT.models[model].startswith(compatibility.PACKAGE_PREFIX):
        return {}
    folder = checks.model_folder(EXPERIMENT, model)
    if folder is None:
        return {"checked": ancient(f"results/models/{model}/checked.json")}
    return folder_files(folder)


def folder_files(folder):
    """A model folder's config and weights, as a job's inputs: replacing them reruns what used the model."""
    return {"config": str(folder / "config.json"), "weights": sorted(str(p) for p in folder.glob("*.safetensors"))}


def given_files(model, task, seed):
    """resolve_finetuned's inputs: a given classifier's config and weights where it is a folder (replacing them reruns
    what used it); nothing for a Hub id or a package (fetched, or read, by the job itself)."""
    spec = EXPERIMENT.given_runs()[(model, task, int(seed))]
    folder = compatibility.spec_folder(spec, REPO)
    if folder is None or not compatibility.is_hf_folder(folder):
        return {}
    return folder_files(folder)


def hand_labels(model):
    """``model``'s hand labels (bertology_core.patterns.stage.HandLabels), or None: read once, by the checks."""
    return CHECKS.labels(model)
