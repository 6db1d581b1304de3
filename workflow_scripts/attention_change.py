"""Per-head cosine between pre-trained and fine-tuned attention maps (rule attention_change)."""

from _common import log_to

log_to(snakemake.log[0])

from bertology_core.attention_change import stats
from bertology_core.data import io
from bertology_core.attention.dump_tables import AttentionDump

before, after = AttentionDump(snakemake.params.before), AttentionDump(snakemake.params.after)
layers = before.scan().select("layer").unique().collect()["layer"].sort().to_list()
per_example = stats.per_example_change(before, after, layers)
io.write_parquet(per_example, snakemake.output.examples)
io.write_parquet(stats.attention_change(per_example), snakemake.output.heads)
