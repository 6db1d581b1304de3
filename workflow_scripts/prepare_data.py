import logging

from _common import log_to

log_to(snakemake.log[0])

from bertology_core import glue, io

frame = glue.prepare_split(
    snakemake.wildcards.task,
    snakemake.wildcards.split,
    source=snakemake.params.source,
    glue_dir=snakemake.params.glue_dir,
    max_examples=snakemake.params.max_examples,
    seed=snakemake.params.seed,
)
io.write_parquet(frame, snakemake.output[0])
logging.info("wrote %d examples to %s", frame.height, snakemake.output[0])
