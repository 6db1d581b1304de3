from _common import log_to

log_to(snakemake.log[0])

from bertology_core import baselines, io

records = [io.read_json(path) for path in snakemake.input.metrics]
long = baselines.collect(snakemake.wildcards.model, records)
summary = baselines.summarise(long)
table = baselines.wide(summary)
io.write_parquet(long, snakemake.output.long)
io.write_parquet(summary, snakemake.output.parquet)
with io.atomic_path(snakemake.output.csv) as tmp:
    table.write_csv(tmp)
io.write_text(baselines.to_markdown(table, f"Baselines: {snakemake.wildcards.model}"), snakemake.output.markdown)
