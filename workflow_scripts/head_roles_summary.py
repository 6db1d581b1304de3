"""Tables and figures of Voita et al.'s head roles, how they relate to Michel et al.'s importance and to disabling,
and the L0 head gates against Michel et al.'s pruning curve (rule head_roles_summary; bertology_core.head_roles.summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import io, tasks
from bertology_core.head_roles import stats, summary
from bertology_core.summaries import figures

inputs, params, model = snakemake.input, snakemake.params, snakemake.wildcards.model
runs = params.runs


def concat(paths) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(p) for p in paths], how="diagonal_relaxed")


outputs = summary.summarise(
    concat(inputs.roles), concat(inputs.voita) if inputs.voita else None, pl.read_parquet(inputs.fitness),
    {tuple(run): pl.read_parquet(path) for run, path in zip(runs["importance"], inputs.importance)},
    [pl.read_parquet(path) for path in inputs.deltas],
    [io.read_json(p) for p in inputs.gates], [pl.read_parquet(p) for p in inputs.gate_predictions],
    {tuple(run): pl.read_parquet(path) for run, path in zip(runs["michel"], inputs.michel)},
    {name: tasks.Task.from_meaning(meaning) for name, meaning in params.tasks.items()},
    summary.HeadRolesSettings(model, stats.RoleThresholds(**params.thresholds), params.syntactic_relations,
                              params.rare_top_frequent, **params.bootstrap),
)
figures.write_outputs(outputs, params.out)
