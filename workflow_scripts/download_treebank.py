"""Download one CoNLL-U file of the treebank and check its sha256 (rule download_treebank)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

from bertology_core.data import treebank

digest = treebank.download(snakemake.params.url, snakemake.output[0], snakemake.params.sha256)
logging.info("%s -> %s (sha256 %s)", snakemake.params.url, snakemake.output[0], digest)
