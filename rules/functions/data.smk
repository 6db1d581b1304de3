# The data stage's input functions, report section, targets and checks; its rules are in
# rules/data.smk (Snakemake's linter asks rules and functions to live in separate files).


# Fail before the DAG is built, with one message naming every missing file and both fixes.
if config["data"]["source"] == "local":
    _missing = glue.missing_local_files(TASKS, glue_dir())
    if _missing:
        raise WorkflowError(glue.missing_files_message(_missing, glue_dir()))


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


@functools.cache


def _checked_glue():
    """(problems, dev split by task) of the local GLUE files: every split read and checked once (columns, labels,
    idx, encoding), each problem naming the file and line. (The Hub's data is checked by its prepare_data job.)"""
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
    return problems, dev_frames


@check("data")


def glue_problems():
    return _checked_glue()[0]


def local_dev_frames():
    """The local dev splits that read without a problem, by task (empty for Hub data)."""
    return _checked_glue()[1]
