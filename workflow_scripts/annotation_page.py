"""The annotation page for hand-labelling a seeded sample of distinct maps (rule annotation_page)."""

from _common import log_to

log_to(snakemake.log[0])

import numpy as np
import polars as pl

from bertology_core.data import io
from bertology_core.patterns import annotation
from bertology_core.attention.dump_tables import AttentionDump

rng = np.random.default_rng(snakemake.params.seed)
dumps = {key: AttentionDump(prefix) for key, prefix in zip(snakemake.params.dump_keys, snakemake.params.dump_prefixes)}
tokens = {key: dump.tokens() for key, dump in dumps.items()}
shape = {key: dump.scan().select((1 + pl.col("layer").max()).alias("layers"), (1 + pl.col("head").max()).alias("heads")).collect().row(0)
         for key, dump in dumps.items()}
keys = sorted(dumps)
chosen: set[tuple] = set()
total = sum(tokens[k].height * shape[k][0] * shape[k][1] for k in keys)
while len(chosen) < min(snakemake.params.maps, total):
    key = keys[rng.integers(len(keys))]
    chosen.add((key, int(rng.integers(tokens[key].height)), int(rng.integers(shape[key][0])), int(rng.integers(shape[key][1]))))
items = [
    {"task": key.split("/")[0], "state": key.split("/", 1)[1], "idx": int(tokens[key]["idx"][example]), "layer": layer, "head": head,
     "tokens": tokens[key]["tokens"][example].to_list(),
     **annotation.encode_map(dumps[key].map(example, layer, head))}
    for key, example, layer, head in sorted(chosen)
]
io.write_text(annotation.annotation_page(items, f"Attention patterns: {snakemake.wildcards.model}"), snakemake.output[0])
