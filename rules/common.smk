# What every stage needs: the validated config, wildcard constraints, the shared helpers, and the stage registry
# (each rule file declares its report sections, the summaries it produces, its targets and its parse-time checks;
# the Snakefile runs the checks once every rule file is included).
import contextlib
import dataclasses
import functools
import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import polars as pl
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate

from bertology_core.data import glue, states, treebank

# a config written with the state names before bertology_core.data.states: one message naming every old key and value,
from bertology_core.models import compatibility
from bertology_core.patterns import pattern_labels
from bertology_core.workflow import code_imports, configuration
# before the schema's (which would only say the key is not allowed)
if problems := configuration.former_state_names(config):
    raise WorkflowError("config uses the former names of model states (see bertology_core/data/states.py):\n  " + "\n  ".join(problems))
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
MODELS = {m["name"]: m["spec"] for m in config["models"]}
TASKS = list(config["tasks"])
SEEDS = list(config["seeds"])
# fine-tuning's states this config runs (bertology_core.data.states), and those a fine-tuning job trains
FINETUNE_STATES = list(config["finetune"]["states"])
TRAINED_STATES = [s for s in FINETUNE_STATES if s in states.TRAINED]

if len(MODELS) != len(config["models"]):
    _names = [m["name"] for m in config["models"]]
    raise WorkflowError(f"config 'models': the name(s) {sorted({n for n in _names if _names.count(n) > 1})} are given to "
                        "more than one entry. Fix: give every model a unique name.")
if problems := configuration.per_task_problems(config, TASKS):
    raise WorkflowError("config:\n  " + "\n  ".join(problems))


# the files of one tidy table (figures.write_table) and of one figure (figures.save_chart): the
# Vega-Lite spec is what the report page embeds
TABLE_FILES = (".parquet", ".csv", ".md")
FIGURE_FILES = (".html", ".png", ".svg", ".vl.json")


def script_code(script):
    """Hash of the library code a workflow script runs: every bertology_core module and script helper it
    imports, followed through their own imports (:func:`bertology_core.workflow.code_imports.reached_modules`). Passed as
    a param (``code=``).

    Snakemake tracks a job's script but not the library the script imports; without this hash a fix in
    the library would not rerun the jobs it changes. The imports are read from the source, so the hash
    cannot miss a module a hand-kept list forgot."""
    digest = hashlib.sha256()
    for module in sorted(code_imports.reached_modules(REPO / "workflow_scripts" / f"{script}.py", REPO)):
        digest.update(module.relative_to(REPO).as_posix().encode())
        digest.update(module.read_bytes())
    return digest.hexdigest()[:16]


def repo_path(path):
    """Relative config paths are relative to the repository, wherever snakemake runs."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else REPO / path


def glue_dir():
    return repo_path(config["data"]["glue_dir"])


wildcard_constraints:
    model="|".join(re.escape(m) for m in MODELS),
    task="|".join(re.escape(t) for t in glue.TASKS),
    split="train|dev|dev_mismatched",
    seed=r"\d+",
    # a fine-tuning run's state, an attention dump's state (trained ones per seed), a probed state
    state="|".join(states.FINE_TUNING),
    dumped=states.DUMPED_PATTERN,
    probed="|".join((states.PRETRAINED, states.RANDOM_WEIGHTS)) + "|(?:" + "|".join(re.escape(t) for t in glue.TASKS) + r")_seed\d+",


MODEL_JOB_GPUS = config["compute"]["gpus"]


def scaled(base):
    """A resource that grows with the attempt, so a job retried after running out of memory or
    time (profiles/slurm sets retries) asks for more: base, 2 x base, 3 x base..."""
    return lambda wildcards, attempt: base * attempt


def data_limits(task):
    """max_train_examples / max_eval_examples for one task: defaults, then per-task overrides."""
    data = config["data"]
    limits = {"max_train_examples": data["max_train_examples"], "max_eval_examples": data["max_eval_examples"]}
    limits.update(data["per_task"].get(task, {}))
    return limits


def hyperparameters(task, state):
    """Fine-tuning hyper-parameters of one job: defaults, then per-task, then per-state overrides.

    Passed as params, so changing one task's value reruns exactly that task's jobs.
    """
    finetune = config["finetune"]
    values = dict(finetune["hyperparameters"])
    values.update(finetune["per_task"].get(task, {}))
    values.update(finetune["per_state"].get(state, {}))
    return values


def evaluation_parameters(task):
    return {"max_length": hyperparameters(task, states.PRETRAINED)["max_length"]}


def eval_splits(task):
    return list(glue.get_task(task).eval_splits)


def run_dir(model, task, state, seed):
    return f"results/finetune/{model}/{task}/{state}/seed{seed}"


def split_state(name):
    """``<prefix>_seed<N>`` -> (prefix, N): a dumped state (``finetuned_seed1``: state, seed) or a probed state
    (``MRPC_seed1``: task, seed)."""
    return states.split_seeded(name)


# --- the stage registry --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Section:
    """One section of the report, declared by the rule file of the stage behind it (declare_section).

    ``runs(model)``: whether this config runs the stage for ``model`` (its summaries are then targets of ``all`` and
    shown on the page); ``shows(model)``: the fine-tuned models (task, state, seed) whose results it shows (the page
    warns about unfit ones); ``analyses_fine_tuned(model)``: whether it analyses a model fine-tuned from the
    pre-trained encoder (so that ``analysis.unfit: skip`` can leave it empty, and the page says why);
    ``summaries``: what it shows, (kind, stem under results/ with ``{model}``), in order, added by summary_outputs;
    ``files``: every file of its summaries (paths under results/ with ``{model}``), shown or not: the page links each
    table's files, so each is a target of ``all`` and a deleted one is written again by the next run."""

    anchor: str
    runs: Callable[[str], bool]
    shows: Callable[[str], list]
    analyses_fine_tuned: Callable[[str], bool] | None
    summaries: list = dataclasses.field(default_factory=list)
    files: list = dataclasses.field(default_factory=list)


SECTIONS: dict[str, Section] = {}  # in declaration order: the Snakefile's include order
TARGETS: list[Callable[[str], list[str]]] = []  # model -> files `all` asks for beyond the summaries
EARLY_TARGETS: list[Callable[[str], list[str]]] = []  # model -> targets that rest on no fine-tuned model
CHECKS: dict[str, list[Callable[[], list[str]]]] = {"choices": [], "inputs": [], "data": []}


def summary_files(kind, stem):
    """The files figures.write_table (kind ``table``) or figures.save_chart (``figure``) writes at ``stem``."""
    return [stem + ext for ext in (TABLE_FILES if kind == "table" else FIGURE_FILES)]


def declare_section(anchor, runs=None, shows=None, analyses_fine_tuned=None, summaries=(), files=()):
    """Declare the report section of a stage (see Section); summary_outputs adds what it shows, or ``summaries``
    ((kind, stem under results/ with ``{model}``)) for files written otherwise. A section may be declared before or
    after the rule whose outputs it shows."""
    section = SECTIONS.setdefault(anchor, Section(anchor, lambda model: True, lambda model: [], None))
    section.runs = runs or section.runs
    section.shows = shows or section.shows
    section.analyses_fine_tuned = analyses_fine_tuned or section.analyses_fine_tuned
    section.summaries += [item for item in summaries if item not in section.summaries]
    written = [*files, *(path for kind, stem in summaries for path in summary_files(kind, stem))]
    section.files += [path for path in written if path not in section.files]
    return section


def report_file(section, path, kind):
    """``path`` (a table's CSV or a figure's PNG) registered with Snakemake's report (``snakemake --report``),
    captioned by the section's text (report/sections/<section>.rst)."""
    return report(path, caption=str(REPO / "report" / "sections" / f"{section}.rst"), category=section, subcategory="{model}",
                  labels={"model": "{model}", kind: Path(path).stem})


def summary_outputs(section, name, stem, files=("table",), shown=("table",)):
    """The outputs of one summary for a rule's ``output:`` (``**summary_outputs(...)``): the files of a table
    (figures.write_table) and/or a figure (figures.save_chart) at ``stem``. Each table's CSV and each figure's PNG
    is registered with Snakemake's report (``snakemake --report``), captioned by the section's text
    (report/sections/<section>.rst); ``shown``: what the bertology page shows of it, in the order of the calls."""
    registered = {"table": ".csv", "figure": ".png"}
    kept = [ext for kind in files for ext in (TABLE_FILES if kind == "table" else FIGURE_FILES) if ext != registered[kind]]
    outputs = {name: multiext(stem, *kept)}
    outputs.update({f"{name}_{kind}_report": report_file(section, stem + registered[kind], kind) for kind in files})
    declare_section(section, summaries=[(kind, stem.removeprefix("results/")) for kind in shown],
                    files=[path for kind in files for path in summary_files(kind, stem.removeprefix("results/"))])
    return outputs


def stage_runs(model, section):
    """Whether this config runs the stage behind a report section for ``model``."""
    return SECTIONS[section].runs(model)


def shown_summaries(model):
    """(kind, stem under results/) of every summary the page shows for ``model``: those of the sections whose stage
    runs (``Section.runs`` decides)."""
    return [(kind, stem.format(model=model)) for section in SECTIONS.values() if section.runs(model) for kind, stem in section.summaries]


def summary_stems(model):
    """Every shown summary stem this config produces for ``model``."""
    return {stem for _, stem in shown_summaries(model)}


def summary_files_of(model):
    """Every file of every summary this config produces for ``model`` (``Section.runs`` decides): ``all`` asks for
    these."""
    return [path.format(model=model) for section in SECTIONS.values() if section.runs(model) for path in section.files]


def check(kind):
    """Register a parse-time check (a function returning problems): ``choices`` (runs the config chooses that it
    does not make), ``inputs`` (always; may raise its own error) or ``data`` (local input files, main process only)."""

    def register(function):
        CHECKS[kind].append(function)
        return function

    return register


def run_checks():
    """Every registered check, once every rule file is included. One message per kind naming every problem, before
    any job (a dry run checks them too). Data checks read the files (about a second for the CPU profile); only in
    the main process, as a cluster job parses the workflow again and need not reread the data."""
    problems = [problem for function in CHECKS["choices"] for problem in function()]
    if problems:
        raise WorkflowError("config: runs chosen that the config does not make:\n  " + "\n  ".join(problems))
    for function in CHECKS["inputs"]:
        function()
    if workflow.is_main_process:
        problems = [problem for function in CHECKS["data"] for problem in function()]
        if problems:
            raise WorkflowError("Bad input data (nothing was run):\n" + "\n".join(problems))


@check("inputs")
def section_texts_problems():
    """Every declared section has its text (report/sections/<anchor>.rst): the page's intro, and the caption
    Snakemake's report needs for the section's files."""
    missing = [anchor for anchor in SECTIONS if not (REPO / "report" / "sections" / f"{anchor}.rst").is_file()]
    if missing:
        raise WorkflowError(f"report/sections: no text for the section(s) {missing} that the stages declare. Fix: write "
                            f"report/sections/<anchor>.rst (a paragraph: what the section shows, from which paper).")
    return []


def early_targets():
    """Targets that rest on no fine-tuned model (the pre-trained encoder's dumps, probes and syntactic heads, the
    treebank), listed apart so that they are scheduled before the fitness checkpoint is done."""
    return list(dict.fromkeys(target for model in MODELS for targets in EARLY_TARGETS for target in targets(model)))


def all_targets(wildcards=None):
    """Every file of every stage's summaries (summary_files_of decides which stages this config runs) and every
    stage's other targets (the fitness table, attention dumps, the annotation page, the treebank, the report page)."""
    targets = []
    for model in MODELS:
        targets += [target for targets_of in TARGETS for target in targets_of(model)]
        targets += [f"results/{path}" for path in sorted(summary_files_of(model))]
    return list(dict.fromkeys(targets))


def named_task_problems(task_lists, state_lists=None):
    """Every list that picks tasks (or <TASK>_seed<N> states) for one stage must name tasks in ``tasks``: one rule,
    one message for all of them, rather than a task silently dropped or fine-tuned anyway. (per_task overrides are
    not such lists: they may name a task not run, and apply once it is.) ``task_lists``/``state_lists``: config key ->
    the list it holds."""
    named = [(key, task, task) for key, tasks in task_lists.items() for task in tasks or []]
    named += [(key, state, split_state(state)[0]) for key, chosen in (state_lists or {}).items() for state in chosen or []
              if states.is_seeded(state)]
    return [f"{key} names {name}, {'which' if name == task else f'whose task {task}'} is not in tasks {TASKS}. "
            f"Fix: add {task} to tasks, or drop {name} from {key}." for key, name, task in named if task not in TASKS]


def fine_tuned_sections():
    """The sections whose stage analyses models fine-tuned from the pre-trained encoder, in declaration order."""
    return [anchor for anchor, section in SECTIONS.items() if section.analyses_fine_tuned]


def skipped_sections(model):
    """Sections whose stage would analyse fine-tuned models of ``model`` were every model fit, but has no fit model
    to run on (analysis.unfit: skip)."""
    with ungated():
        would = [anchor for anchor in fine_tuned_sections() if SECTIONS[anchor].analyses_fine_tuned(model)]
    return sorted(anchor for anchor in would if not SECTIONS[anchor].analyses_fine_tuned(model))
