# The patterns stage's input functions, report section, targets and checks; its rules are in
# rules/patterns.smk (Snakemake's linter asks rules and functions to live in separate files).


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
    return [key for key in labelled_dump_inputs(model) if key.split("/")[1] != states.PRETRAINED]


def labelled_recipe(model, key):
    task, dumped = key.split("/")
    state, seed = split_state(dumped)
    return f"{run_dir(model, task, state, seed)}/evaluation.json"


declare_section("patterns", shows=dumped_runs, analyses_fine_tuned=lambda model: bool(dumped_fine_tuned(model)))


TARGETS.append(lambda model: [f"results/patterns/{model}/annotate.html"])


@check("inputs")


def hand_labels_read():
    """Every line of every model's hand labels is checked before any job."""
    for model in MODELS:
        _hand_label_file(model)
    return []


@check("data")


def hand_label_data_problems():
    """Hand labels naming local dev examples that are not there (against Hub data: checked by labelled_maps)."""
    return [problem for model in MODELS for problem in hand_label_problems(model, local_dev_frames())]
