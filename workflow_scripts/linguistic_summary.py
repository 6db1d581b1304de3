"""Tables and figures of attention to linguistic features, [CLS] in the last layer and token-to-token attention
along relations, per model (rule linguistic_summary; bertology_core.linguistic.summary)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.fitness import verdict_stats
from bertology_core.linguistic import summary
from bertology_core.summaries import figures

params, inputs, model = snakemake.params, snakemake.input, snakemake.wildcards.model
# the fine-tuned rows of a task pool the seeds of its dumped fine-tuned models
verdicts = verdict_stats.Verdicts(pl.read_parquet(inputs.fitness), model, verdict_stats.seeds_by_task(params.fine_tuned))
per_dump = {kind: dict(zip(params.dump_keys, map(pl.read_parquet, inputs[kind]))) for kind in ("features", "relations", "cls_shares")}
outputs = summary.summarise(per_dump["features"], per_dump["relations"], per_dump["cls_shares"], verdicts,
                            summary.LinguisticSettings(model, params.examples, params.left_out))
figures.write_outputs(outputs, params.out)
