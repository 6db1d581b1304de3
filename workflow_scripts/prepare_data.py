import logging

from _common import log_to

log_to(snakemake.log[0])

from bertology_core.data import io, tasks

params = snakemake.params
task = tasks.declare(params.task["name"], params.task["declaration"], ".")
# the one source the plan chose; local files are this job's inputs (not params, so moving the checkout reruns nothing)
source = task.files or task.hub
if isinstance(source, tasks.Files):
    source = source.at({split: snakemake.input[f"split_{split}"] for split in source.splits})
frame = tasks.prepare_split(task, snakemake.wildcards.split, source, max_examples=params.max_examples, seed=params.seed)
io.write_parquet(frame, snakemake.output[0])
logging.info("wrote %d examples to %s", frame.height, snakemake.output[0])
