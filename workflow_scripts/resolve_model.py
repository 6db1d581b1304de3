import logging

from _common import log_to

log_to(snakemake.log[0])

from bertology_core import io, models

resolved = models.resolve_model(snakemake.params.spec)
io.write_json(resolved.to_json(), snakemake.output[0])
logging.info("resolved %s -> %s", snakemake.params.spec, resolved.path)
