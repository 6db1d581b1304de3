import dataclasses
import logging
from pathlib import Path

from _common import log_to

log_to(snakemake.log[0])

from bertology_core.data import io

# a local folder arrives as input files (its config.json); hub ids and packages by name
from bertology_core.models import loading
target = str(Path(snakemake.input.config).parent) if "config" in snakemake.input.keys() else snakemake.params.spec
resolved = dataclasses.replace(loading.resolve_model(target, snakemake.params.model_cache), spec=snakemake.params.spec)
io.write_json(resolved.to_json(), snakemake.output[0])
logging.info("resolved %s -> %s", snakemake.params.spec, resolved.path)
