"""Per-map pattern features and rule labels of one attention dump (rule pattern_features)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

from bertology_core.data import io
from bertology_core.patterns import patterns
from bertology_core.attention.dump_files import AttentionDump

dump = AttentionDump(snakemake.params.dump_prefix)
frame = patterns.dump_features(dump, patterns.RuleThresholds.from_dict(snakemake.params.rules))
io.write_parquet(frame, snakemake.output[0])
logging.info("%d maps: %s", frame.height, dict(frame["rule_label"].value_counts().iter_rows()))
