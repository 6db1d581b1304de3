"""Every layer's word representations of one model state on the treebank samples (rule probe_features)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import numpy as np
import torch
from safetensors.torch import save_file

from _probing import load_encoder, treebank_sample
from bertology_core import io, probing

params = snakemake.params
encoder, tokenizer = load_encoder(snakemake)
tensors, metadata = {}, {"pooling": params.pooling, "state": snakemake.wildcards.probed}
for split in ("train", "dev"):
    frame = treebank_sample(snakemake.input[split], params.sample[split], params.sample["seed"])
    aligned = probing.align_words(tokenizer, frame["forms"].to_list(), params.max_length)
    features, complete = probing.word_representations(encoder, aligned, params.pooling, params.batch_size)
    tensors[split] = torch.from_numpy(features).to(torch.float16).contiguous()  # half the disk; probes standardise anyway
    tensors[f"{split}_complete"] = torch.from_numpy(complete.astype(np.uint8))
    metadata[f"{split}_sentences"] = str(frame.height)
    logging.info("%s: %d sentences, %d words (%d with a representation), features %s",
                 split, frame.height, complete.size, int(complete.sum()), tuple(features.shape))
with io.atomic_path(snakemake.output[0]) as tmp:
    save_file(tensors, tmp, metadata=metadata)
