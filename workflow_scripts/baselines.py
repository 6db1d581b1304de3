from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.baselines import tables
from bertology_core.data import io
from bertology_core.summaries import figures

model = snakemake.wildcards.model
records = [io.read_json(path) for path in snakemake.input.metrics]
long = tables.collect(model, records)
summary = tables.summarise(long)
seeds = {}
for record in records:
    seeds.setdefault((record["task"], record["state"]), []).append(int(record["seed"]))
verdicts = pl.read_parquet(snakemake.input.fitness).filter(pl.col("model") == model)
table = tables.with_fitness(tables.wide(summary), verdicts, seeds)
io.write_parquet(long, snakemake.output.long)
io.write_parquet(summary, snakemake.output.summary)
figures.write_table(table, snakemake.output.table[0].removesuffix(".parquet"))
