# Is each fine-tuned model fit for analysis? (bertology_core/fitness.py) Its dev metric against the task's
# trivial predictor, with a paired bootstrap interval; analysis.unfit decides what the analyses do with an
# unfit model fine-tuned from the pre-trained encoder.


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


rule model_fitness:
    conda:
        "../envs/tables.yaml"
    input:
        evaluation="results/finetune/{model}/{task}/{state}/seed{seed}/evaluation.json",
        predictions="results/finetune/{model}/{task}/{state}/seed{seed}/predictions.parquet",
    output:
        metrics="results/finetune/{model}/{task}/{state}/seed{seed}/metrics.json",
    wildcard_constraints:
        state="|".join(states.TRAINED),
    params:
        code=script_code("model_fitness"),
        settings=lambda wc: fitness_settings(wc.task),
    log:
        "logs/model_fitness/{model}/{task}/{state}/seed{seed}.log",
    benchmark:
        "results/benchmarks/model_fitness/{model}/{task}/{state}/seed{seed}.tsv"
    resources:
        mem_mb=scaled(1000),
        runtime=scaled(10),
    script:
        "../workflow_scripts/model_fitness.py"


# One checkpoint for every model and run: under skip and fail the analyses of fine-tuned models wait for it,
# and the DAG is re-evaluated with the verdicts (one checkpoint, so the fine-tuning jobs still run side by side).
checkpoint fitness_table:
    conda:
        "../envs/tables.yaml"
    input:
        lambda wc: [f"{run_dir(model, t, i, s)}/metrics.json" for model in MODELS for t, i, s in fine_tuned_runs()],
    output:
        multiext(FITNESS_TABLE, *TABLE_FILES),
    params:
        code=script_code("fitness_table"),
        unfit=config["analysis"]["unfit"],
        stem=lambda wc, output: output[0].removesuffix(TABLE_FILES[0]),
    log:
        "logs/fitness_table.log",
    benchmark:
        "results/benchmarks/fitness_table.tsv"
    resources:
        mem_mb=scaled(1000),
        runtime=scaled(10),
    script:
        "../workflow_scripts/fitness_table.py"
