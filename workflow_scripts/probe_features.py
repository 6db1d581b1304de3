"""Every layer's word representations of one model state on the treebank samples (rule probe_features)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import numpy as np
import polars as pl

from bertology_core.data import mapped, states, treebank
from bertology_core.models import device, loading
from bertology_core.probing import probes

params = snakemake.params
job_device, _ = device.model_job(snakemake.threads, snakemake.params.precision)
# the probed state's encoder: pre-trained, fine-tuned, or the pre-trained architecture with random weights
folder = snakemake.input.get("model", loading.read_resolved(snakemake.input.resolved)["path"])
random_seed = snakemake.params.get("random_seed", 0) if snakemake.wildcards.probed == states.RANDOM_WEIGHTS else None
encoder = loading.load_encoder(folder, random_seed).to(job_device)
tokenizer = loading.load_tokenizer(folder)
aligned, metadata = {}, {"pooling": params.pooling, "state": snakemake.wildcards.probed}
for split in ("train", "dev"):
    frame = treebank.sample(pl.read_parquet(snakemake.input[split]), params.sample[split], params.sample["seed"])
    aligned[split] = probes.align_words(tokenizer, frame["forms"].to_list(), params.max_length)
    metadata[f"{split}_sentences"] = str(frame.height)
layers, hidden = encoder.config.num_hidden_layers + 1, encoder.config.hidden_size
# float16: half the disk and the memory; probes standardise anyway. Written through a memory map of the output file:
# the job holds a batch, not the features (4.6 GB for BERT-base on the full treebank)
specs = {}
for split, words in ((split, int(sum(found.num_words))) for split, found in aligned.items()):
    specs[split] = ((layers, words, hidden), np.float16)
    specs[f"{split}_complete"] = ((words,), np.uint8)
with mapped.write_mapped(snakemake.output[0], specs, metadata) as tensors:
    for split, found in aligned.items():
        features, complete = probes.word_representations(encoder, found, params.pooling, params.batch_size, np.float16,
                                                          out=tensors[split])
        tensors[f"{split}_complete"][:] = complete
        mapped.release(features)
        logging.info("%s: %s sentences, %d words (%d with a representation), features %s",
                     split, metadata[f"{split}_sentences"], complete.size, int(complete.sum()), tuple(features.shape))
