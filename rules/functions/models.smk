# The models stage's input functions, report section, targets and checks; its rules are in
# rules/models.smk (Snakemake's linter asks rules and functions to live in separate files).


def model_requirements():
    """What the config asks of every model: each task's label count (1: regression) and every max_length it sets,
    by config key (the models must have that many positions)."""
    lengths = {}
    finetune = config["finetune"]
    if "max_length" in finetune["hyperparameters"]:
        lengths["finetune.hyperparameters.max_length"] = finetune["hyperparameters"]["max_length"]
    for section in ("per_task", "per_state"):
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


def _model_geometry(model):
    """(layers, heads) of a package or folder model, read from its config.json; (None, None) for a Hub id, whose
    hand labels rule check_model checks."""
    folder = model_folder(model)
    return compatibility.geometry(compatibility.read_config(folder)) if folder is not None else (None, None)
