"""Voita et al.'s head roles of one attention dump (rule head_roles): confidence, dominant offset and its share,
rare-token share (on the examples whose rarest piece is not among the most frequent of the frequency source: the
task's training split, or head_roles.frequency_corpus) and its chance rate per head."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.attention import dump_tables
from bertology_core.data import io, states
from bertology_core.head_roles import measure_tables
from bertology_core.models import loading

wc = snakemake.wildcards
tokenizer = loading.load_tokenizer(loading.read_resolved(snakemake.input.resolved)["path"])
source = snakemake.params.frequency_source
texts = measure_tables.frequency_texts(snakemake.input.get("train"), snakemake.input.get("frequency_corpus"))
frequencies = measure_tables.piece_frequencies(tokenizer, texts)
roles = measure_tables.dump_roles(dump_tables.AttentionDump(snakemake.params.dump), frequencies, snakemake.params.rare_top_frequent)
state = states.dumped_state(wc.dumped)
seed = states.split_seeded(wc.dumped)[1] if states.is_seeded(wc.dumped) else None
roles = roles.with_columns(pl.lit(wc.task).alias("task"), pl.lit(state).alias("state"), pl.lit(seed, pl.Int64).alias("seed"),
                           pl.lit(source).alias("frequency_source"))
io.write_parquet(roles.select("task", "state", "seed", pl.exclude("task", "state", "seed")), snakemake.output.roles)
logging.info("%d distinct pieces (%d in all) counted on the %s; %d of %d examples count for the rare-token role (rarest piece "
             "not among the %d most frequent); most confident heads:\n%s", len(frequencies), sum(frequencies.values()),
             source, roles["rare_examples"][0], roles["examples"][0], snakemake.params.rare_top_frequent,
             roles.sort("confidence", descending=True).head(5))
