"""Clark et al. 2019's syntactic-head accuracies and offset baselines of one model state (rule syntactic_heads), and
Voita et al. 2019's token-level accuracies per relation and direction with their own offset baselines (the head roles
stage's syntactic role)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import numpy as np
import polars as pl

from bertology_core.data import io, states, treebank
from bertology_core.engine.attention_function import use_engine
from bertology_core.models import device, loading
from bertology_core.probing import probes, syntactic_heads
from bertology_core.disabling.stats import split_halves

settings = snakemake.params.settings
job_device, _ = device.model_job(snakemake.threads, snakemake.params.precision)
# the probed state's encoder: pre-trained, fine-tuned, or the pre-trained architecture with random weights
folder = snakemake.input.get("model", loading.read_resolved(snakemake.input.resolved)["path"])
random_seed = snakemake.params.get("random_seed", 0) if snakemake.wildcards.probed == states.RANDOM_WEIGHTS else None
encoder = loading.load_encoder(folder, random_seed).to(job_device)
tokenizer = loading.load_tokenizer(folder)
encoder = use_engine(encoder)
frame = treebank.sample(pl.read_parquet(snakemake.input.treebank), settings["sentences"], snakemake.params.seed)
aligned = probes.align_words(tokenizer, frame["forms"].to_list(), snakemake.params.max_length)
relations = [[r.split(":")[0] for r in s] if settings["strip_subtypes"] else s for s in frame["deprels"].to_list()]
counts = syntactic_heads.relation_counts(encoder, aligned, frame["heads"].to_list(), relations, settings["batch_size"], settings["offsets"])
state = pl.lit(snakemake.wildcards.probed).alias("state")
io.write_parquet(counts.per_head().with_columns(state), snakemake.output.per_head)
best = counts.best(settings["exclude"], settings["min_words"]).with_columns(state)
io.write_parquet(best, snakemake.output.best)
# the same table chosen on half the sentences and reported on the other half
selection = split_halves(np.zeros(frame.height), stratify=False, seed=settings["split_seed"])
held_out = syntactic_heads.held_out_best(counts, selection, settings["resamples"], settings["level"], settings["split_seed"],
                                         settings["exclude"], settings["min_words"])
io.write_parquet(held_out.with_columns(state), snakemake.output.held_out)
# Voita et al.'s table: every relation the treebank has (the head roles summary keeps head_roles.syntactic_relations),
# with Clark et al.'s table's exclusions and minimum number of words
voita = counts.voita.table(settings["exclude"], settings["min_words"]).with_columns(state)
io.write_parquet(voita, snakemake.output.voita)
logging.info("%d sentences, %d words\n%s\nVoita et al.'s best head per relation and direction:\n%s", frame.height,
             counts.words.get("all", 0), best,
             voita.sort("accuracy", descending=True).group_by("relation", "direction", maintain_order=True).first())
