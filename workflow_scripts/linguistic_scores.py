"""Per-head attention to linguistic features, token-to-token attention in each configured direction and
[CLS]'s distribution of one dump (rule linguistic_scores)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.data import io
from bertology_core.linguistic import score_tables
from bertology_core.attention.dump_tables import AttentionDump
from bertology_core.models.loading import load_tokenizer, read_resolved

tokenizer = load_tokenizer(read_resolved(snakemake.input.resolved)["path"])
frames = score_tables.score_dump(
    AttentionDump(snakemake.params.dump_prefix), tokenizer, pl.read_parquet(snakemake.input.data),
    pl.read_parquet(snakemake.input.spacy), directions=snakemake.params.directions,
)
for name, path in zip(("features", "relations", "cls_shares", "cls_max"), snakemake.output):
    io.write_parquet(frames[name], path)
