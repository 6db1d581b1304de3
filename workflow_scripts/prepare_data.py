import logging
from pathlib import Path

from _common import log_to

log_to(snakemake.log[0])

from bertology_core.data import glue, io

frame = glue.prepare_split(
    snakemake.wildcards.task,
    snakemake.wildcards.split,
    source=snakemake.params.source,
    # local source: the TSV is this job's input (<glue_dir>/<TASK>/<file>.tsv); not a param, so
    # moving the checkout does not rerun anything
    glue_dir=Path(snakemake.input[0]).parents[1] if snakemake.input else None,
    max_examples=snakemake.params.max_examples,
    seed=snakemake.params.seed,
)
io.write_parquet(frame, snakemake.output[0])
logging.info("wrote %d examples to %s", frame.height, snakemake.output[0])
