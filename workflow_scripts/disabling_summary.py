"""Tables and figures of the disabling sweeps of one model (rule disabling_summary; bertology_core.disabling.summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import tasks
from bertology_core.disabling import summary
from bertology_core.fitness import verdict_stats
from bertology_core.summaries import figures

params, inputs, model = snakemake.params, snakemake.input, snakemake.wildcards.model
outputs = summary.summarise(
    pl.concat([pl.read_parquet(p) for p in inputs.deltas]), pl.concat([pl.read_parquet(p) for p in inputs.selection]),
    [((task, seed), pl.read_parquet(p)) for (task, seed), p in zip(params.greedy_runs, inputs.greedy)],
    verdict_stats.Verdicts(pl.read_parquet(inputs.fitness), model, params.fitness_runs),
    {name: tasks.Task.from_meaning(meaning) for name, meaning in params.tasks.items()},
    summary.DisablingSettings(model, params.modes, params.level, params.extremes, params.seed_note, params.example_note),
)
figures.write_outputs(outputs, params.out)
