"""Fetch a Hub model and check it against the config before any model job (rule check_model)."""

import logging
import sys
from pathlib import Path

from _common import log_to

log_to(snakemake.log[0])

from bertology_core.data import io
from bertology_core.models import compatibility, loading
from bertology_core.patterns import label_tables

spec = snakemake.params.spec
try:
    resolved = loading.resolve_model(spec, snakemake.params.model_cache)  # downloads once; refuses unsupported architectures and tokenizers
    problems = compatibility.model_problems(Path(resolved.path), **snakemake.params.requirements)
    for labels in snakemake.input.hand_labels:
        label_tables.read_labels(labels, resolved.num_hidden_layers, resolved.num_attention_heads)
except (compatibility.ModelSpecError, label_tables.LabelsError) as error:
    problems = [str(error)]
if problems:
    message = f"Model {snakemake.wildcards.model} (spec {spec!r}) cannot be used with this config:\n  " + "\n  ".join(problems)
    print(message, file=sys.__stderr__)  # on the terminal too, not only in the job's log
    raise SystemExit(message)
io.write_json({"spec": spec, "path": resolved.path, "requirements": snakemake.params.requirements,
               "weights_loaded": resolved.weights_loaded}, snakemake.output[0])
logging.info("%s fits the config", spec)
