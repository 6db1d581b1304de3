"""Per-map pattern features and rule labels of one attention dump (rule pattern_features)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

from bertology_core.data import io
from bertology_core.patterns import feature_tables
from bertology_core.attention.dump_tables import AttentionDump

dump = AttentionDump(snakemake.params.dump_prefix)
frame = feature_tables.dump_features(dump, feature_tables.RuleThresholds.from_dict(snakemake.params.rules))
io.write_parquet(frame, snakemake.output[0])
logging.info("%d maps: %s", frame.height, dict(frame["rule_label"].value_counts().iter_rows()))
