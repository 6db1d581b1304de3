"""Every fine-tuned model's fitness verdict in one table (checkpoint fitness_table); under fitness.if_unfit: fail,
stop here when a model fine-tuned from the pre-trained encoder is unfit."""

import sys

from _common import log_to

log_to(snakemake.log[0])

from bertology_core.data import io, states
from bertology_core.fitness import verdict_stats
from bertology_core.summaries import figures

records = [io.read_json(path) for path in snakemake.input]
table = verdict_stats.verdict_table([verdict_stats.verdict_row(r["model"]["name"], r) for r in records])
unfit = table.filter(~table["fit"] & (table["state"] == states.FINETUNED))
if snakemake.params.unfit == "fail" and unfit.height:
    message = verdict_stats.unfit_message(unfit)
    print(message, file=sys.__stderr__)  # on the terminal too, not only in the job's log
    raise SystemExit(message)
figures.write_table(table, snakemake.params.stem)
