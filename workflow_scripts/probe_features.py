"""Every layer's word representations of one model state on the treebank samples (rule probe_features)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import numpy as np
import polars as pl
import torch
from safetensors.torch import save_file

from bertology_core.data import io, states, treebank
from bertology_core.models import device, models, precision
from bertology_core.probing import probing

params = snakemake.params
job_device = device.job_device(snakemake.threads)
precision.for_job(snakemake.params.precision, job_device)  # measures in the policy's precision from here on
# the probed state's encoder: pre-trained, fine-tuned, or the pre-trained architecture with random weights
folder = snakemake.input.get("model", io.read_json(snakemake.input.resolved)["path"])
random_seed = snakemake.params.get("random_seed", 0) if snakemake.wildcards.probed == states.RANDOM_WEIGHTS else None
encoder = models.load_encoder(folder, random_seed).to(job_device)
tokenizer = models.load_tokenizer(folder)
tensors, metadata = {}, {"pooling": params.pooling, "state": snakemake.wildcards.probed}
for split in ("train", "dev"):
    frame = treebank.sample(pl.read_parquet(snakemake.input[split]), params.sample[split], params.sample["seed"])
    aligned = probing.align_words(tokenizer, frame["forms"].to_list(), params.max_length)
    # float16: half the disk and the memory; probes standardise anyway
    features, complete = probing.word_representations(encoder, aligned, params.pooling, params.batch_size, np.float16)
    tensors[split] = torch.from_numpy(features)
    tensors[f"{split}_complete"] = torch.from_numpy(complete.astype(np.uint8))
    metadata[f"{split}_sentences"] = str(frame.height)
    logging.info("%s: %d sentences, %d words (%d with a representation), features %s",
                 split, frame.height, complete.size, int(complete.sum()), tuple(features.shape))
with io.atomic_path(snakemake.output[0]) as tmp:
    save_file(tensors, tmp, metadata=metadata)
