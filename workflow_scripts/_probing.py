"""What the probing scripts share: the state's encoder and the seeded treebank samples."""

from __future__ import annotations

import polars as pl
import torch
from transformers import AutoConfig, AutoModel

from bertology_core import device, glue, io, models


def load_encoder(snakemake):
    """(encoder, tokenizer) of the job's model state: the pre-trained encoder, the same architecture
    with weights drawn by its own initialiser (``random``, seeded), or a fine-tuned model's encoder; on the job's
    device."""
    job_device = device.job_device(snakemake.threads)
    resolved = io.read_json(snakemake.input.resolved)
    folder = snakemake.input.get("model", resolved["path"])
    if snakemake.wildcards.probed == "random":
        torch.manual_seed(snakemake.params.get("random_seed", 0))
        encoder = AutoModel.from_config(AutoConfig.from_pretrained(folder, trust_remote_code=False))
    else:
        encoder = AutoModel.from_pretrained(folder, use_safetensors=True, trust_remote_code=False)
    return encoder.to(job_device).eval(), models.load_tokenizer(folder)


def treebank_sample(path: str, sentences: int | None, seed: int) -> pl.DataFrame:
    """A seeded sample of at most ``sentences`` sentences, in treebank order (all when None)."""
    return glue.subsample(pl.read_parquet(path), sentences, seed, order="sentence")
