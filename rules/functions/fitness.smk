# The fitness stage's input functions, report section, targets and checks; its rules are in
# rules/fitness.smk (Snakemake's linter asks rules and functions to live in separate files).


# Fitness verdicts: what analysis.unfit lets the analyses use.

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


def analysed(model, task, state, seed):
    """Whether the analyses use the model fine-tuned into ``state`` with ``seed``: always under warn, and for the
    from-scratch baselines; under skip only if it is fit (the DAG waits for the fitness checkpoint); under
    fail the checkpoint itself stops the run if a model is unfit, so what remains is fit."""
    if config["analysis"]["unfit"] == "warn" or state != states.FINETUNED or not _GATED[0]:
        return True
    path = Path(checkpoints.fitness_table.get().output[0])
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _VERDICTS:
        import polars as pl

        table = pl.read_parquet(path)
        _VERDICTS.clear()
        _VERDICTS[key] = {(m, t, i, int(s)): bool(f) for m, t, i, s, f in table.select("model", "task", "state", "seed", "fit").iter_rows()}
    return _VERDICTS[key][(model, task, state, int(seed))]


def fitness_inputs():
    """Every summary's input: the verdicts it labels its rows with."""
    return f"{FITNESS_TABLE}.parquet"


# the verdicts' table, which the page links: a target, so a deleted file of it is written again
TARGETS.append(lambda model: [FITNESS_TABLE + ext for ext in TABLE_FILES])
