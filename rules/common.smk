# Config validation, wildcard constraints and the input functions every stage shares.
import contextlib
import hashlib
import re
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

import functools

import polars as pl
import yaml

from bertology_core import code_imports, compatibility, configuration, glue, pattern_labels, treebank

# YAML 1.1 reads 2e-5 as a string: where the schema asks for a number, a string that spells one is one
configuration.numbers_from_strings(config, yaml.safe_load((Path(workflow.basedir) / "schemas" / "config.schema.yaml").read_text()))
validate(config, schema="../schemas/config.schema.yaml")

REPO = Path(workflow.basedir)
MODELS = {m["name"]: m["spec"] for m in config["models"]}
TASKS = list(config["tasks"])
SEEDS = list(config["seeds"])
INITS = list(config["finetune"]["inits"])
TRAINED_INITS = [i for i in INITS if i != "untuned"]

if len(MODELS) != len(config["models"]):
    raise WorkflowError("config 'models': two entries share a name. Fix: give every model a unique name.")


# the files of one tidy table (figures.write_table) and of one figure (figures.save_chart): the
# Vega-Lite spec is what the report page embeds
TABLE_FILES = (".parquet", ".csv", ".md")
FIGURE_FILES = (".html", ".png", ".svg", ".vl.json")


def script_code(script):
    """Hash of the library code a workflow script runs: every bertology_core module and script helper it
    imports, followed through their own imports (:func:`bertology_core.code_imports.reached_modules`). Passed as
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


# Fail before the DAG is built, with one message naming every missing file and both fixes.
if config["data"]["source"] == "local":
    _missing = glue.missing_local_files(TASKS, glue_dir())
    if _missing:
        raise WorkflowError(glue.missing_files_message(_missing, glue_dir()))


TREEBANK_DOWNLOADED = "results/treebank/source"


def treebank_file(split):
    """A split's CoNLL-U file: in treebank.dir, or downloaded from treebank.url (rule download_treebank)."""
    name = config["treebank"]["files"][split]
    return Path(TREEBANK_DOWNLOADED) / name if config["treebank"]["url"] else repo_path(config["treebank"]["dir"]) / name


if config["treebank"]["dir"] and config["treebank"]["url"]:
    raise WorkflowError("config 'treebank': both dir and url are set. Fix: set the one the files come from, the other to null.")
TREEBANK_SPLITS = list(config["treebank"]["files"]) if config["treebank"]["dir"] or config["treebank"]["url"] else []
_missing = [str(treebank_file(s)) for s in TREEBANK_SPLITS if config["treebank"]["dir"] and not treebank_file(s).is_file()]
if _missing:
    raise WorkflowError(
        "config 'treebank': CoNLL-U file(s) not found:\n  " + "\n  ".join(_missing)
        + "\nFix: point treebank.dir (and treebank.files) at a UD treebank, e.g. a checkout of "
        "UD_English-EWT, or set treebank.dir: null to skip the treebank stages."
    )


def model_requirements():
    """What the config asks of every model: each task's label count (1: regression) and every max_length it sets,
    by config key (the models must have that many positions)."""
    lengths = {}
    finetune = config["finetune"]
    if "max_length" in finetune["hyperparameters"]:
        lengths["finetune.hyperparameters.max_length"] = finetune["hyperparameters"]["max_length"]
    for section in ("per_task", "per_init"):
        for name, values in finetune[section].items():
            if "max_length" in values:
                lengths[f"finetune.{section}.{name}.max_length"] = values["max_length"]
    if TREEBANK_SPLITS:
        lengths["probing.max_length"] = config["probing"]["max_length"]
    return {"label_counts": {task: glue.get_task(task).num_labels for task in TASKS}, "max_lengths": lengths}


def model_folder(model):
    """The folder of a package or folder spec (relative paths: to the repository); None for a Hub id (fetched and
    checked by rule check_model)."""
    spec = MODELS[model]
    if spec.startswith(compatibility.PACKAGE_PREFIX):
        return compatibility.package_model_folder(spec.removeprefix(compatibility.PACKAGE_PREFIX))
    return compatibility.spec_folder(spec, REPO)


def model_problems(model):
    """Why a package or folder model cannot be used by this config (architecture, tokenizer, label counts,
    positions): caught when the workflow is parsed. A Hub id is checked by rule check_model, before any other
    model job."""
    try:
        folder = model_folder(model)
    except compatibility.ModelSpecError as error:
        return [str(error)]
    if folder is None:
        return []
    if not folder.is_dir():
        return [f"folder {folder} does not exist. Fix: point spec at a save_pretrained() folder (relative paths are "
                "relative to the repository), or at a Hub id."]
    if not compatibility.is_hf_folder(folder):
        return [f"folder {folder} has no config.json or no *.safetensors weights. Fix: save the model with "
                "save_pretrained() (safetensors; .bin pickles are refused)."]
    return compatibility.model_problems(folder, **model_requirements())


_bad_models = [f"  {name}: spec {MODELS[name]!r}: {problem}" for name in MODELS for problem in model_problems(name)]
if _bad_models:
    raise WorkflowError("config 'models':\n" + "\n".join(_bad_models))


def local_data_problems():
    """Every problem of the local input files (GLUE TSVs: columns, labels, idx, encoding; CoNLL-U: format,
    encoding; hand labels naming dev examples that are not there), each naming the file and line. (The Hub's
    data is checked by its prepare_data job, hand labels against it by labelled_maps.)"""
    problems, dev_frames = [], {}
    if config["data"]["source"] == "local":
        for task in TASKS:
            for split in ["train", *eval_splits(task)]:
                path = glue.local_path(glue.get_task(task), split, glue_dir())
                try:
                    frame = glue.check_split(glue.get_task(task), glue.read_local(glue.get_task(task), split, glue_dir()), str(path))
                except glue.DataError as error:
                    problems.append(str(error))
                    continue
                if split == "dev":
                    dev_frames[task] = frame
        for model in MODELS:
            problems += hand_label_problems(model, dev_frames)
    for split in TREEBANK_SPLITS if config["treebank"]["dir"] else []:  # downloads: checked by prepare_treebank
        try:
            treebank.validate(treebank_file(split))
        except treebank.TreebankError as error:
            problems.append(str(error))
    return problems


wildcard_constraints:
    model="|".join(re.escape(m) for m in MODELS),
    task="|".join(re.escape(t) for t in glue.TASKS),
    split="train|dev|dev_mismatched",
    seed=r"\d+",
    init="untuned|random|pretrained",
    state=r"untuned|(?:pretrained|random)_seed\d+",
    probed=r"untuned|random|(?:" + "|".join(re.escape(t) for t in glue.TASKS) + r")_seed\d+",


MODEL_JOB_GPUS = config["compute"]["gpus"]


def scaled(base):
    """A resource that grows with the attempt, so a job retried after running out of memory or
    time (profiles/slurm sets retries) asks for more: base, 2 x base, 3 x base..."""
    return lambda wildcards, attempt: base * attempt


def dump_file(path):
    """Attention dumps are temp() unless attention.keep_dumps: deleted once every analysis read them."""
    return path if config["attention"]["keep_dumps"] else temp(path)


def local_model_files(wildcards):
    """resolve_model's inputs: a folder's config and weights (replacing its weights reruns what used them); for a Hub
    id, the verdict of check_model, ancient(); re-checking it for a changed config never reruns the model's jobs."""
    spec = MODELS[wildcards.model]
    if spec.startswith(compatibility.PACKAGE_PREFIX):
        return {}
    folder = model_folder(wildcards.model)
    if folder is None:
        return {"checked": ancient(f"results/models/{wildcards.model}/checked.json")}
    return {"config": str(folder / "config.json"), "weights": sorted(str(p) for p in folder.glob("*.safetensors"))}


def data_limits(task):
    """max_train_examples / max_eval_examples for one task: defaults, then per-task overrides."""
    data = config["data"]
    limits = {"max_train_examples": data["max_train_examples"], "max_eval_examples": data["max_eval_examples"]}
    limits.update(data["per_task"].get(task, {}))
    return limits


def hyperparameters(task, init):
    """Fine-tuning hyper-parameters of one job: defaults, then per-task, then per-init overrides.

    Passed as params, so changing one task's value reruns exactly that task's jobs.
    """
    finetune = config["finetune"]
    values = dict(finetune["hyperparameters"])
    values.update(finetune["per_task"].get(task, {}))
    values.update(finetune["per_init"].get(init, {}))
    return values


def evaluation_parameters(task):
    return {"max_length": hyperparameters(task, "untuned")["max_length"]}


def eval_splits(task):
    return list(glue.get_task(task).eval_splits)


def run_dir(model, task, init, seed):
    return f"results/finetune/{model}/{task}/{init}/seed{seed}"


def fine_tuned_runs():
    """Every (task, init, seed) the config fine-tunes: the top-level seeds of every trained init, and the
    extra seeds of the disabling sweeps, pruning and probing."""
    runs = set()
    for task in TASKS:
        for init in TRAINED_INITS:
            runs |= {(task, init, seed) for seed in finetuned_seeds(task, init)}
    return sorted(runs, key=lambda run: (TASKS.index(run[0]), run[1], run[2]))


def metrics_files(model):
    """The metrics.json of every run of the baselines table: untuned (top-level seeds) and every fine-tuned run."""
    untuned = [(task, "untuned", seed) for task in TASKS for seed in SEEDS] if "untuned" in INITS else []
    return [f"{run_dir(model, t, i, s)}/metrics.json" for t, i, s in untuned + fine_tuned_runs()]


def attention_states(model, task):
    """Dumped model states of a task: ``untuned`` and ``<init>_seed<seed>`` for its fine-tuned encoders
    (those analysed, see rules/fitness.smk)."""
    states = []
    for init in config["attention"]["states"]:
        if init == "untuned":
            states.append("untuned")
        elif init in TRAINED_INITS:
            states += [f"{init}_seed{seed}" for seed in SEEDS if analysed(model, task, init, seed)]
    return states


def attention_change_runs(model):
    """(task, seed) pairs whose fine-tuned model is compared with the pre-trained encoder (Kovaleva et al. section 4.3)."""
    if not {"untuned", "pretrained"} <= set(config["attention"]["states"]) or "pretrained" not in TRAINED_INITS:
        return []
    return [(task, seed) for task in TASKS for seed in SEEDS if analysed(model, task, "pretrained", seed)]


def split_state(state):
    """``<prefix>_seed<N>`` -> (prefix, N): a dump state (``pretrained_seed1``: init 1) or a probed state
    (``MRPC_seed1``: task 1)."""
    prefix, seed = state.rsplit("_seed", 1)
    return prefix, int(seed)


def state_init(state):
    return "untuned" if state == "untuned" else split_state(state)[0]


def dumped_fine_tuned(model):
    """(task, seed) of every dumped model fine-tuned from the pre-trained encoder."""
    return [(task, split_state(state)[1]) for task in TASKS for state in attention_states(model, task)
            if state.startswith("pretrained_seed")]


def dump_attention_inputs(wildcards):
    """The encoder to dump: the resolved pre-trained folder, or a fine-tuned model folder."""
    inputs = {"resolved": f"results/models/{wildcards.model}/resolved.json", "data": f"results/data/{wildcards.task}/dev.parquet"}
    if wildcards.state != "untuned":
        init, seed = split_state(wildcards.state)
        inputs["model"] = f"{run_dir(wildcards.model, wildcards.task, init, seed)}/model"
    return inputs


def attention_dumps(model):
    return [f"results/attention/{model}/{key}.json" for key in dump_keys(model)]


def early_targets():
    """Targets that rest on no fine-tuned model: the pre-trained encoder's dumps, probes and syntactic heads,
    and the treebank. Listed apart so that they are scheduled before the fitness checkpoint is done."""
    targets = [f"results/treebank/{split}.parquet" for split in TREEBANK_SPLITS]
    for model in MODELS:
        if "untuned" in config["attention"]["states"]:
            targets += [f"results/attention/{model}/{task}/untuned.json" for task in TASKS]
        if TREEBANK_SPLITS:
            targets += [f"results/probing/{model}/{s}/probes.parquet" for s in ("untuned", "random") if s in config["probing"]["states"]]
            with ungated():  # parsed before the fitness checkpoint exists; untuned is never a fine-tuned model
                untuned_heads = "untuned" in syntactic_head_states(model)
            if untuned_heads:
                targets.append(f"results/probing/{model}/untuned/syntactic_heads.parquet")
    return targets


def all_targets(wildcards=None):
    """Every stage's summary (summary_stems decides which stages this config runs), the kept attention
    dumps, the annotation page, the treebank and the report page."""
    targets = []
    for model in MODELS:
        targets += [*attention_dumps(model), f"results/patterns/{model}/annotate.html"]
        targets += [f"results/{stem}.md" for stem in sorted(summary_stems(model))]
    targets += [f"results/treebank/{split}.parquet" for split in TREEBANK_SPLITS]
    # every stage's tables and figures on one page, with the head atlas
    targets.append("results/report/index.html")
    return targets


def prepare_data_input(wildcards):
    # Depend on the TSV itself, so an edited file reruns what uses it.
    if config["data"]["source"] != "local":
        return []
    return str(glue.local_path(glue.get_task(wildcards.task), wildcards.split, glue_dir()))


def max_examples(wildcards):
    key = "max_train_examples" if wildcards.split == "train" else "max_eval_examples"
    return data_limits(wildcards.task)[key]


def eval_inputs(wildcards):
    return [f"results/data/{wildcards.task}/{split}.parquet" for split in eval_splits(wildcards.task)]


def dump_keys(model):
    """``<task>/<state>`` of every attention dump of ``model`` (the analyses' unit)."""
    return [f"{task}/{state}" for task in TASKS for state in attention_states(model, task)]


def _model_geometry(model):
    """(layers, heads) of a package or folder model, read from its config.json; (None, None) for a Hub id, whose
    hand labels rule check_model checks."""
    folder = model_folder(model)
    return compatibility.geometry(compatibility.read_config(folder)) if folder is not None else (None, None)


@functools.cache
def _hand_label_file(model):
    """(training labels frame, label files by role, card path, every label frame of the training and test
    labels) of ``model``'s hand labels, or None: read once, every line checked (for a package or folder model,
    layers and heads against its config.json); test labels must name maps the training labels do not."""
    settings = config["patterns"]
    try:
        if settings["labels_csv"]:
            files, card = {"labels": repo_path(settings["labels_csv"])}, None
        else:
            card = pattern_labels.find_label_card(repo_path(settings["labels_dir"]) if settings["labels_dir"] else None, MODELS[model])
            if card is None:
                return None
            files = pattern_labels.LabelCard.read(card).files(card)
        geometry = _model_geometry(model)
        frames = {role: pattern_labels.read_labels(path, *geometry) for role, path in files.items()}
        if "test" in frames:
            pattern_labels.check_test_disjoint(frames["labels"], frames["test"], files["test"], files["labels"])
        for role in ("second_pass", "second_labeller"):
            if role in frames:
                pattern_labels.check_relabelled_subset(frames["labels"], frames[role], files[role], files["labels"], role)
        return frames["labels"], files, card, frames
    except pattern_labels.LabelsError as error:
        raise WorkflowError(f"patterns: {error}") from None


def hand_label_files(model):
    """Every label file of ``model``'s hand labels (labels, second pass, second labeller, test)."""
    found = _hand_label_file(model)
    return [str(path) for path in found[1].values()] if found else []


def hand_label_problems(model, dev_frames):
    """Hand labels (training and test) of this run's dumps that name a GLUE idx the task's dev split (as prepared:
    subsampled by max_eval_examples) does not hold, each naming the label file's line. ``dev_frames``: task -> dev split."""
    found = _hand_label_file(model)
    if found is None:
        return []
    files, frames = found[1], found[3]
    with ungated():  # what the config would dump; the fitness checkpoint cannot be read while parsing
        keys = set(dump_keys(model))
    problems = []
    for task, frame in dev_frames.items():
        sample = glue.subsample(frame, data_limits(task)["max_eval_examples"], config["data"]["subsample_seed"])
        held = set(sample["idx"].to_list())
        for role in ("labels", "test"):
            if role not in frames:
                continue
            wanted = frames[role].filter(pl.col("task") == task)
            for state, idx, line in wanted.select("state", "idx", "line").iter_rows():
                if f"{task}/{state}" in keys and idx not in held:
                    subsampled = " (in its seeded sample of data.max_eval_examples)" if sample.height < frame.height else ""
                    problems.append(f"{files[role]}:{line}: field 'idx' = {idx}: {task}'s dev split holds no such example"
                                    f"{subsampled}. Fix: label maps of examples of {task} dev, or raise max_eval_examples.")
    return problems


LABEL_FILE_ROLES = ("labels", "card", "second_pass", "second_labeller", "test")  # hand_label_set's files


def hand_label_set(model):
    """The hand labels that train ``model``'s pattern CNN, or None: ``patterns.labels_csv`` or the set in
    ``patterns.labels_dir`` whose card names the model's spec. The label files by role (``labels``, ``card``,
    ``second_pass``, ``second_labeller``, ``test``) and ``idx``: per labelled dump of this run (``task/state``),
    the GLUE idx whose maps are computed for the classifier (training and test labels)."""
    found = _hand_label_file(model)
    if found is None:
        return None
    _, files, card, frames = found
    keys = set(dump_keys(model))
    named = pl.concat([frames[role].select("task", "state", "idx") for role in ("labels", "test") if role in frames])
    idx = {}
    for task, state, number in named.unique().sort("task", "state", "idx").iter_rows():
        if f"{task}/{state}" in keys:
            idx.setdefault(f"{task}/{state}", []).append(number)
    if not idx:
        return None
    return {**{role: str(path) for role, path in files.items()}, "card": str(card) if card else None, "idx": idx}


def labelled_dump_inputs(model):
    """The labelled dumps (maps of the hand-labelled examples) of ``model``, by ``task/state``."""
    labelled = hand_label_set(model)
    return {key: f"results/patterns/{model}/labelled/{key}" for key in (labelled["idx"] if labelled else {})}


def labelled_recipe_keys(model):
    """The labelled dumps of fine-tuned models (their recipes are checked against the label card)."""
    return [key for key in labelled_dump_inputs(model) if not key.endswith("untuned")]


def labelled_recipe(model, key):
    task, state = key.split("/")
    init, seed = split_state(state)
    return f"{run_dir(model, task, init, seed)}/evaluation.json"


def dump_inputs(model, key):
    """The two Parquet files of one dump."""
    prefix = f"results/attention/{model}/{key}"
    return [f"{prefix}.attention.parquet", f"{prefix}.tokens.parquet"]


def linguistic_inputs(wildcards):
    """Every dump's linguistic score tables, by kind (inputs of linguistic_summary)."""
    return {
        kind: [f"results/linguistic/{wildcards.model}/{key}.{kind}.parquet" for key in dump_keys(wildcards.model)]
        for kind in ("features", "relations", "cls_shares", "cls_max")
    } | {"fitness": fitness_inputs()}


def disabling_setting(task, key):
    """A disabling setting of one task: its per_task override, else the default."""
    return config["disabling"]["per_task"].get(task, {}).get(key, config["disabling"][key])


def disabling_inits():
    """The swept fine-tuned models: disabling.inits that the config fine-tunes at all."""
    return [init for init in config["disabling"]["inits"] if init in TRAINED_INITS]


def disabling_seeds(task):
    """The seeds configured for a task's sweeps (fine-tuned for them whether or not they are analysed)."""
    return disabling_setting(task, "seeds") or SEEDS


def swept_seeds(model, task, init):
    """The seeds whose fine-tuned model is swept: the configured ones that are analysed."""
    return [seed for seed in disabling_seeds(task) if analysed(model, task, init, seed)]


def disabling_runs(model):
    """(task, init, seed) of every sweep."""
    return [(task, init, seed) for task in TASKS for init in disabling_inits() for seed in swept_seeds(model, task, init)]


def greedy_seeds(model, task, init):
    """Swept seeds that also get the greedy search (none when greedy_steps is 0)."""
    if disabling_setting(task, "greedy_steps") == 0:
        return []
    wanted = disabling_setting(task, "greedy_seeds")
    return [seed for seed in swept_seeds(model, task, init) if wanted is None or seed in wanted]


def disabling_dir(model, task, init, seed):
    return f"results/disabling/{model}/{task}/{init}/seed{seed}"


def disabling_task_inits(model):
    """(task, init) of every per-task statistics job: those with at least one swept seed."""
    pairs = {(task, init) for task, init, _ in disabling_runs(model)}
    return [(task, init) for task in TASKS for init in disabling_inits() if (task, init) in pairs]


def greedy_runs(model):
    """(task, init, seed) of every greedy search."""
    return [(t, i, s) for t, i in disabling_task_inits(model) for s in greedy_seeds(model, t, i)]


def disabling_summary_inputs(wildcards):
    model = wildcards.model
    return {
        "fitness": fitness_inputs(),
        "deltas": [f"results/disabling/{model}/{task}/{init}/deltas.parquet" for task, init in disabling_task_inits(model)],
        "selection": [f"results/disabling/{model}/{task}/{init}/selection.parquet" for task, init in disabling_task_inits(model)],
        "greedy": [f"{disabling_dir(model, t, i, s)}/greedy.parquet" for t, i, s in greedy_runs(model)],
    }


def configured_pruning_tasks():
    wanted = config["pruning"]["tasks"]
    if "pretrained" not in TRAINED_INITS:
        return []
    return [task for task in TASKS if wanted is None or task in wanted]


def pruning_seeds(task):
    """The seeds configured for a task's pruning (fine-tuned for it whether or not they are analysed)."""
    return config["pruning"]["per_task"].get(task, {}).get("seeds") or config["pruning"]["seeds"] or SEEDS


def pruning_runs(model):
    """(task, seed) of every pruned fine-tuned model: the configured ones that are analysed."""
    return [(task, seed) for task in configured_pruning_tasks() for seed in pruning_seeds(task) if analysed(model, task, "pretrained", seed)]


def subnetwork_seeds(task):
    """Pruned seeds whose subnetworks are re-fine-tuned (pruning.per_task.<TASK>.subnetwork_seeds; null: all)."""
    wanted = config["pruning"]["per_task"].get(task, {}).get("subnetwork_seeds")
    return pruning_seeds(task) if wanted is None else list(wanted)


def pruning_dir(model, task, seed):
    return f"results/pruning/{model}/{task}/pretrained/seed{seed}"


def subnetwork_recipe(task):
    """Re-fine-tuning hyper-parameters of the subnetworks: fine-tuning's, with pruning's overrides."""
    values = hyperparameters(task, "pretrained")
    if config["pruning"]["subnetwork_epochs"] is not None:
        values["epochs"] = config["pruning"]["subnetwork_epochs"]
    return values


def subnetwork_reference_retrained():
    """Whether the full model is re-fine-tuned as the reference (the subnetworks' recipe departs from
    fine-tuning's), rather than taken from the fine-tuning run itself."""
    return config["pruning"]["subnetwork_max_train_examples"] is not None or config["pruning"]["subnetwork_epochs"] is not None


def subnetwork_names():
    """``full`` (when re-fine-tuned) and ``<method>-<kind>-<protocol>``: a ticket's subnetworks per protocol."""
    kinds = config["pruning"]["subnetworks"]
    methods = config["pruning"]["subnetwork_methods"] or config["pruning"]["methods"]
    names = [f"{method}-{kind}-{protocol}" for method in methods for protocol in lottery_protocols() for kind in kinds]
    return (["full"] if names and subnetwork_reference_retrained() else []) + names


def lottery_protocols():
    """How lottery tickets are chosen and reported: held_out (chosen on half A of dev, reported on half B)
    always; paper (Prasanna et al.'s: chosen and reported on dev) beside it with pruning.paper_protocol."""
    return ["held_out"] + (["paper"] if config["pruning"]["paper_protocol"] else [])


def lottery_split(protocol):
    """What a protocol's halves of dev depend on (so that only its jobs rerun): the split seed for held_out."""
    return {"split_seed": config["pruning"]["split_seed"]} if protocol == "held_out" else {}


def subnetwork_runs(model):
    """(task, seed, network) of every re-fine-tuned subnetwork."""
    return [(t, s, n) for t, s in pruning_runs(model) if s in subnetwork_seeds(t) for n in subnetwork_names()]


def pruning_summary_inputs(wildcards):
    model, methods = wildcards.model, config["pruning"]["methods"]
    runs = pruning_runs(model)
    return {
        "fitness": fitness_inputs(),
        "importance": [f"{pruning_dir(model, t, s)}/importance.parquet" for t, s in runs],
        "michel": [f"{pruning_dir(model, t, s)}/michel_curve.parquet" for t, s in runs],
        "curves": [f"{pruning_dir(model, t, s)}/{m}_{p}_curve.parquet" for t, s in runs for m in methods for p in lottery_protocols()],
        "tickets": [f"{pruning_dir(model, t, s)}/{m}_{p}_ticket.json" for t, s in runs for m in methods for p in lottery_protocols()],
        # survival and stability: the held-out tickets
        "masks": [f"{pruning_dir(model, t, s)}/{m}_held_out_mask.safetensors" for t, s in runs for m in methods],
        "compact": [f"{pruning_dir(model, t, s)}/s_compact.json" for t, s in runs if "s" in methods],
        "subnetworks": [f"{pruning_dir(model, t, s)}/subnetworks/{n}.json" for t, s, n in subnetwork_runs(model)],
        "subnetwork_predictions": [f"{pruning_dir(model, t, s)}/subnetworks/{n}.predictions.parquet" for t, s, n in subnetwork_runs(model)],
        # the fine-tuned models' own dev predictions: the full reference when it is not re-fine-tuned
        "finetuned_predictions": [f"results/finetune/{model}/{t}/pretrained/seed{s}/predictions.parquet" for t, s in runs],
        "dev": sorted({f"results/data/{t}/dev.parquet" for t, _ in runs}),
    }


PRUNE_DIR = "results/pruning/{model}/{task}/pretrained/seed{seed}"


def importance_data(wildcards):
    return f"results/data/{wildcards.task}/{config['pruning']['importance_split']}.parquet"


def pruning_params():
    """The importance settings every pruning job depends on."""
    keys = ("importance_split", "importance_examples", "normalize_by_layer")
    return {key: config["pruning"][key] for key in keys} | {"subsample_seed": config["data"]["subsample_seed"]}


def pruning_dev_sample():
    """The dev examples that score pruning decisions: a seeded subsample, or all of dev (examples null)."""
    return {"examples": config["pruning"]["dev_examples"], "seed": config["data"]["subsample_seed"]}


def subnetwork_inputs(wildcards):
    inputs = {
        "resolved": f"results/models/{wildcards.model}/resolved.json",
        "train": f"results/data/{wildcards.task}/train.parquet",
        "dev": f"results/data/{wildcards.task}/dev.parquet",
    }
    if wildcards.network != "full":
        method, kind, protocol = wildcards.network.split("-")
        inputs["mask"] = f"{pruning_dir(wildcards.model, wildcards.task, wildcards.seed)}/{method}_{protocol}_mask.safetensors"
        if (method, kind) == ("m", "bad"):  # the smallest weights of the fine-tuned model
            inputs["finetuned"] = f"{run_dir(wildcards.model, wildcards.task, 'pretrained', wildcards.seed)}/model"
    return inputs


# --- probing and syntactic heads ---


def probed_runs():
    """(task, seed) of every fine-tuned model the config probes (whether or not it is analysed)."""
    settings = config["probing"]
    if not TREEBANK_SPLITS or "finetuned" not in settings["states"] or "pretrained" not in TRAINED_INITS:
        return []
    tasks = TASKS if settings["tasks"] is None else [t for t in settings["tasks"] if t in TASKS]
    return [(task, seed) for task in tasks for seed in settings["seeds"] or finetuned_seeds(task, "pretrained", probing=False)]


def _state_is_analysed(model, state):
    if state in ("untuned", "random"):
        return True
    task, seed = split_state(state)
    return analysed(model, task, "pretrained", seed)


def probing_states(model):
    """Probed model states: ``untuned`` (the pre-trained encoder), ``random`` (its architecture with
    random weights) and ``<task>_seed<seed>`` (fine-tuned from the pre-trained encoder, if analysed)."""
    if not TREEBANK_SPLITS:
        return []
    states = [s for s in ("untuned", "random") if s in config["probing"]["states"]]
    states += [f"{task}_seed{seed}" for task, seed in probed_runs()]
    return [state for state in states if _state_is_analysed(model, state)]


def probed_states(model):
    """(task, seed) of every probed model fine-tuned from the pre-trained encoder."""
    return [split_state(state) for state in probing_states(model) if state not in ("untuned", "random")]


def finetuned_seeds(task, init="pretrained", probing=True):
    """Every seed a task is fine-tuned with from ``init``: the top-level seeds and the extra seeds of its
    disabling sweeps, pruning and probing."""
    seeds = set(SEEDS)
    if init in disabling_inits():
        seeds |= set(disabling_seeds(task))
    if init == "pretrained":
        if task in configured_pruning_tasks():
            seeds |= set(pruning_seeds(task))
        if probing:
            seeds |= {seed for probed, seed in probed_runs() if probed == task}
            chosen = config["probing"]["syntactic_heads"]["states"] if TREEBANK_SPLITS else None
            seeds |= {split_state(s)[1] for s in chosen or [] if s not in ("untuned", "random") and split_state(s)[0] == task}
    return sorted(seeds)


def syntactic_head_states(model):
    """States whose heads are scored against the treebank (null: the pre-trained encoder and every
    fine-tuned state probed), those analysed."""
    if not TREEBANK_SPLITS:
        return []
    chosen = config["probing"]["syntactic_heads"]["states"]
    states = [s for s in probing_states(model) if s != "random"] if chosen is None else list(chosen)
    return [state for state in states if _state_is_analysed(model, state)]


def probing_model_inputs(wildcards):
    """The encoder of a state: the resolved pre-trained folder (untuned and random, whose weights are
    drawn from its config) or a fine-tuned model folder."""
    inputs = {"resolved": f"results/models/{wildcards.model}/resolved.json"}
    if wildcards.probed not in ("untuned", "random"):
        task, seed = split_state(wildcards.probed)
        inputs["model"] = f"{run_dir(wildcards.model, task, 'pretrained', seed)}/model"
    return inputs


def probing_sample():
    """Seeded sentence samples of the treebank splits, shared by extraction and probes."""
    settings = config["probing"]
    return {"train": settings["train_sentences"], "dev": settings["dev_sentences"], "seed": settings["sample_seed"]}


def probing_summary_inputs(wildcards):
    model = wildcards.model
    return {
        "fitness": fitness_inputs(),
        "probes": [f"results/probing/{model}/{state}/probes.parquet" for state in probing_states(model)],
        "heads": [f"results/probing/{model}/{state}/syntactic_heads.parquet" for state in syntactic_head_states(model)],
        "held_out": [f"results/probing/{model}/{state}/syntactic_heads_held_out.parquet" for state in syntactic_head_states(model)],
    }


def stage_runs(model, section):
    """Whether this config runs the stage behind a section of the report's layout for ``model`` (the others
    always run)."""
    runs = {
        "change": lambda: bool(attention_change_runs(model)),
        "disabling": lambda: bool(disabling_runs(model)),
        "pruning": lambda: bool(pruning_runs(model)),
        "probing": lambda: bool(probing_states(model)),
    }
    return runs[section]() if section in runs else True


def summary_stems(model):
    """Every summary (stem under results/, each with a ``.md``) this config produces for ``model``: those of
    the report layout's sections whose stage runs. The one place that decides which stages run (all_targets
    asks for these; the report shows them)."""
    from bertology_core.report import report_stems

    return {stem for section, _, stem in report_stems(model) if stage_runs(model, section)}


def report_inputs(wildcards):
    """The figure specs and tables the report page shows, for every model."""
    from bertology_core.report import item_file, report_stems

    items = [
        f"results/{item_file(kind, stem)}"
        for model in MODELS
        for section, kind, stem in report_stems(model)
        if stage_runs(model, section)
    ]
    return {"shown": items, "fitness": fitness_inputs()}


def analysed_seeds(model, task):
    """Every seed of a task whose model fine-tuned from the pre-trained encoder some stage analyses."""
    seeds = {seed for t, seed in dumped_fine_tuned(model) if t == task}
    if "pretrained" in disabling_inits():
        seeds |= set(swept_seeds(model, task, "pretrained"))
    seeds |= {seed for t, seed in pruning_runs(model) if t == task}
    seeds |= {seed for t, seed in probed_states(model) if t == task}
    return sorted(seeds)


def section_runs(model):
    """Report section anchor -> the fine-tuned models (task, init, seed) whose results it shows: the report
    warns in each section that shows an unfit one."""
    dumped = [(task, *split_state(state)) for task in TASKS for state in attention_states(model, task) if state != "untuned"]
    pruned = [(task, "pretrained", seed) for task, seed in pruning_runs(model)]
    probed = [(task, "pretrained", seed) for task, seed in probed_states(model)]
    swept = disabling_runs(model)
    return {
        "baselines": fine_tuned_runs(),
        "claims": sorted(set(dumped + swept + pruned)),
        "patterns": dumped, "linguistic": dumped, "cls": dumped,
        "change": [(task, "pretrained", seed) for task, seed in attention_change_runs(model)],
        "disabling": swept, "pruning": pruned, "probing": probed,
        "atlas": sorted(set(dumped + swept + pruned + probed)),
    }


def head_atlas_inputs(wildcards):
    """The per-head summary tables the atlas joins (those this config produces)."""
    model = wildcards.model
    produced = summary_stems(model)
    wanted = {
        "patterns": f"patterns/{model}/summary/heads",
        "features": f"linguistic/{model}/summary/features",
        "cosine": f"attention_change/{model}/summary/cosine",
        "disabling": f"disabling/{model}/summary/heads",
        "importance": f"pruning/{model}/summary/importance",
        "survival": f"pruning/{model}/summary/survival",
        "best_relations": f"probing/{model}/summary/syntactic_heads",
    }
    inputs = {name: f"results/{stem}.parquet" for name, stem in wanted.items() if stem in produced}
    if "best_relations" in inputs:
        inputs["relations"] = [f"results/probing/{model}/{state}/head_relations.parquet" for state in syntactic_head_states(model)]
    inputs["fitness"] = fitness_inputs()
    return inputs


def _task_list_problems():
    """Every list that picks tasks (or <TASK>_seed<N> states) for one stage must name tasks in ``tasks``: one rule,
    one message for all of them, rather than a task silently dropped or fine-tuned anyway. (per_task overrides are
    not such lists: they may name a task not run, and apply once it is.)"""
    task_lists = {"pruning.tasks": config["pruning"]["tasks"], "probing.tasks": config["probing"]["tasks"]}
    state_lists = {"probing.syntactic_heads.states": config["probing"]["syntactic_heads"]["states"],
                   "probing.reference.states": config["probing"]["reference"]["states"]}
    named = [(key, task, task) for key, tasks in task_lists.items() for task in tasks or []]
    named += [(key, state, split_state(state)[0]) for key, states in state_lists.items() for state in states or []
              if state not in ("untuned", "random")]
    return [f"{key} names {name}, {'which' if name == task else f'whose task {task}'} is not in tasks {TASKS}. "
            f"Fix: add {task} to tasks, or drop {name} from {key}." for key, name, task in named if task not in TASKS]


def _stage_choice_problems():
    """Choices of runs that name a task or seed the config does not run: caught when the workflow is parsed,
    not after fine-tuning (and not silently ignored)."""
    problems = _task_list_problems()
    for task, settings in config["pruning"]["per_task"].items():
        wanted = settings.get("subnetwork_seeds") or []
        if wanted and task not in configured_pruning_tasks():
            problems.append(f"pruning.per_task.{task}.subnetwork_seeds: {task} is not pruned (pruning.tasks, tasks). "
                            "Fix: prune the task or drop its subnetwork_seeds.")
        elif set(wanted) - set(pruning_seeds(task)):
            problems.append(f"pruning.per_task.{task}.subnetwork_seeds {sorted(wanted)} names seeds that are not pruned "
                            f"({pruning_seeds(task)}). Fix: add them to pruning.per_task.{task}.seeds or drop them.")
    unpruned = sorted(set(config["pruning"]["subnetwork_methods"] or []) - set(config["pruning"]["methods"]))
    if unpruned:
        problems.append(f"pruning.subnetwork_methods names {unpruned}, not in pruning.methods {config['pruning']['methods']}. "
                        "Fix: add them to pruning.methods or drop them.")
    if config["pruning"]["importance_split"] == "dev" and "s" in config["pruning"]["methods"]:
        # s-pruning's order comes from importance: on all of dev, half B would help choose the held-out ticket
        problems.append("pruning.importance_split: dev lets the dev half that reports s-pruning's ticket choose which heads "
                        "it prunes. Fix: importance_split: train (the default), or drop s from pruning.methods.")
    return problems


if _stage_choice_problems():
    raise WorkflowError("config: runs chosen that the config does not make:\n  " + "\n  ".join(_stage_choice_problems()))


# Fitness verdicts (rules/fitness.smk): what analysis.unfit lets the analyses use.

FITNESS_TABLE = "results/tables/fitness"


def fitness_settings(task):
    """The verdict's settings for one task: the defaults, with the task's margin."""
    settings = {k: v for k, v in config["analysis"]["fitness"].items() if k != "per_task"}
    settings.update(config["analysis"]["fitness"]["per_task"].get(task, {}))
    return settings


_VERDICTS = {}
_GATED = [True]  # False inside ungated(): what the config would analyse were every model fit


@contextlib.contextmanager
def ungated():
    """Inside: every fine-tuned model counts as analysed, so nothing reads the fitness checkpoint (what the
    config would run were every model fit; also the only safe way to ask while the workflow is parsed)."""
    _GATED[0] = False
    try:
        yield
    finally:
        _GATED[0] = True


def analysed(model, task, init, seed):
    """Whether the analyses use the model fine-tuned with ``init`` and ``seed``: always under warn, and for
    random-init baselines; under skip only if it is fit (the DAG waits for the fitness checkpoint); under
    fail the checkpoint itself stops the run if a model is unfit, so what remains is fit."""
    if config["analysis"]["unfit"] == "warn" or init != "pretrained" or not _GATED[0]:
        return True
    path = Path(checkpoints.fitness_table.get().output[0])
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _VERDICTS:
        import polars as pl

        table = pl.read_parquet(path)
        _VERDICTS.clear()
        _VERDICTS[key] = {(m, t, i, int(s)): bool(f) for m, t, i, s, f in table.select("model", "task", "init", "seed", "fit").iter_rows()}
    return _VERDICTS[key][(model, task, init, int(seed))]


def _analyses_fine_tuned(model, section):
    """Whether the stage behind a report section analyses some model fine-tuned from the pre-trained encoder."""
    if section == "patterns":
        return bool(dumped_fine_tuned(model))
    return stage_runs(model, section)


def skipped_sections(model):
    """Report sections whose stage would analyse fine-tuned models of ``model`` were every model fit, but has no
    fit model to run on (analysis.unfit: skip)."""
    sections = ("patterns", "change", "disabling", "pruning", "probing")
    with ungated():
        would = {section for section in sections if _analyses_fine_tuned(model, section)}
    return sorted(section for section in would if not _analyses_fine_tuned(model, section))


def fitness_inputs():
    """Every summary's input: the verdicts it labels its rows with."""
    return f"{FITNESS_TABLE}.parquet"


# The claims table's inputs (rules/claims.smk).


def claims_inputs(wildcards):
    """Every per-example or per-element table the claims resample, from the stages this config runs."""
    model = wildcards.model
    dumped = dumped_fine_tuned(model)
    swept = [(task, init) for task, init in disabling_task_inits(model) if init == "pretrained"]
    inputs = {
        "fitness": fitness_inputs(),
        "report": f"results/patterns/{model}/classifier/report.json",
        "classes": [f"results/patterns/{model}/{task}/pretrained_seed{seed}.classes.parquet" for task, seed in dumped],
        "changes": [f"results/attention_change/{model}/{task}/seed{seed}.examples.parquet" for task, seed in attention_change_runs(model)],
        "selection": [f"results/disabling/{model}/{task}/pretrained/selection.parquet" for task, _ in swept],
        "deltas": [f"results/disabling/{model}/{task}/pretrained/deltas.parquet" for task, _ in swept],
        "michel_curves": [f"{pruning_dir(model, t, s)}/michel_curve.parquet" for t, s in pruning_runs(model)],
        "michel_predictions": [f"{pruning_dir(model, t, s)}/michel_predictions.parquet" for t, s in pruning_runs(model)],
    }
    if pruning_runs(model):
        inputs["stability"] = f"results/pruning/{model}/summary/stability.parquet"
    if "untuned" in syntactic_head_states(model):
        inputs["syntactic"] = f"results/probing/{model}/untuned/syntactic_heads_held_out.parquet"
    if "untuned" in probing_states(model):
        inputs["probe_words"] = f"results/probing/{model}/untuned/probe_words.parquet"
    return inputs


def claims_runs(model):
    """What the claims script needs to read its inputs: the (task, seed) of each per-model file, the seeds each
    per-task table pools, and what each stage did (ran, skipped by analysis.unfit, not run)."""
    return {
        "classes": dumped_fine_tuned(model),
        "changes": attention_change_runs(model),
        "pruned": pruning_runs(model),
        "swept_seeds": {task: swept_seeds(model, task, "pretrained") for task in TASKS if "pretrained" in disabling_inits()},
        "pruned_seeds": {task: [s for t, s in pruning_runs(model) if t == task] for task in TASKS},
        "stages": {
            section: "skipped" if section in skipped_sections(model) else "ran" if stage_runs(model, section) else "not run"
            for section in ("patterns", "change", "disabling", "pruning", "probing")
        },
    }


# Every local input file is read and checked when the workflow is parsed (about a second for the CPU profile), so a
# dry run (-n) checks them too and bad data stops the run with one message before any job. Only in the main
# process: a cluster job parses the workflow again and need not reread the data.
for _model in MODELS:
    _hand_label_file(_model)  # every line of the hand labels checked before any job

if workflow.is_main_process:
    _problems = local_data_problems()
    if _problems:
        raise WorkflowError("Bad input data (nothing was run):\n" + "\n".join(_problems))
