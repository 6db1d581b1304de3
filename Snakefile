# bertology: the classic BERTology analyses on any Hugging Face encoder, as one DAG.
import time

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

from bertology_core.workflow import configuration

min_version("9.0")


# files modified after this are "written by this run" in the disk report
RUN_STARTED = time.time()


# Snakemake's message for a config that is not valid YAML names neither the file nor the line. (A file given with
# --configfile is read before this Snakefile: the Makefile's targets check theirs the same way first.)
if problem := configuration.yaml_problem(f"{workflow.basedir}/config.yaml"):
    raise WorkflowError(problem)


# Resolved against the repository so that --directory elsewhere still finds the defaults.
configfile: f"{workflow.basedir}/config.yaml"


include: "rules/common.smk"
include: "rules/fitness.smk"
include: "rules/data.smk"
include: "rules/treebank.smk"
include: "rules/models.smk"
include: "rules/finetune.smk"
include: "rules/baselines.smk"
include: "rules/attention.smk"
include: "rules/patterns.smk"
include: "rules/attention_change.smk"
include: "rules/linguistic.smk"
include: "rules/disabling.smk"
include: "rules/pruning.smk"
include: "rules/probing.smk"
include: "rules/head_roles.smk"
include: "rules/outliers.smk"
include: "rules/layer_mix.smk"
include: "rules/claims.smk"
include: "rules/report.smk"


# every stage's parse-time checks, once all of them are declared: bad config or data stops here, before any job
run_checks()


rule all:
    default_target: True
    input:
        # what needs no fine-tuned model starts at once, whatever analysis.unfit says
        early=early_targets(),
        # a function: under analysis.unfit skip or fail, these depend on the fitness checkpoint
        rest=all_targets,


onsuccess:
    # How much each stage keeps and how much this run wrote (results/disk_usage.md)
    from bertology_core.data import io
    from bertology_core.workflow import disk

    if Path("results").is_dir():
        table = disk.format_table(disk.disk_usage("results", since=RUN_STARTED))
        io.write_text(table, "results/disk_usage.md")
        print(f"Disk use per stage (also in results/disk_usage.md):\n{table}")
