# bertology: the classic BERTology analyses on any Hugging Face encoder, as one DAG.
from snakemake.utils import min_version

min_version("9.0")


# Resolved against the repository so that --directory elsewhere still finds the defaults.
configfile: f"{workflow.basedir}/config.yaml"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/models.smk"
include: "rules/finetune.smk"
include: "rules/baselines.smk"
include: "rules/attention.smk"


rule all:
    default_target: True
    input:
        all_targets(),
