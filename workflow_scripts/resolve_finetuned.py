"""Resolve and check an already fine-tuned classifier given for a task (rule resolve_finetuned, models[].finetuned):
fetched like any model, then checked against the task (label count and names) and against the pre-trained encoder
named beside it (geometry, tokenizer), before its evaluation and every analysis that reads it."""

import dataclasses
import logging
import sys
from pathlib import Path

from _common import log_to

log_to(snakemake.log[0])

from bertology_core.data import io, tasks
from bertology_core.models import compatibility, loading

spec, task = snakemake.params.spec, tasks.Task.from_meaning(snakemake.params.task)
encoder = loading.read_resolved(snakemake.input.encoder)
try:
    target = str(Path(snakemake.input.config).parent) if "config" in snakemake.input.keys() else spec
    resolved = dataclasses.replace(loading.resolve_model(target, snakemake.params.model_cache), spec=spec)
    problems = compatibility.given_classifier_problems(Path(resolved.path), task.name, task.label_names,
                                                       Path(encoder["path"]), snakemake.params.max_lengths, task.kind)
    if not problems and (difference := loading.tokenizer_difference(resolved.path, encoder["path"])):
        problems = [f"{difference}: every job reads {task.name} tokenised with the encoder's tokenizer. Fix: set the "
                    "model's spec to the encoder this classifier was fine-tuned from."]
except compatibility.ModelSpecError as error:
    problems = [str(error)]
if problems:
    wc = snakemake.wildcards
    message = (f"Model {wc.model}: the fine-tuned classifier given for {wc.task} seed {wc.seed} (models[].finetuned: "
               f"{spec!r}) cannot be used:\n  " + "\n  ".join(problems))
    print(message, file=sys.__stderr__)  # on the terminal too, not only in the job's log
    raise SystemExit(message)
io.write_json(resolved.to_json(), snakemake.output[0])
logging.info("resolved %s -> %s, a %s classifier", spec, resolved.path, task.name)
