# bertology: the classic BERTology analyses on any Hugging Face encoder, as one DAG.
import time

from snakemake.exceptions import IncompleteCheckpointException, WorkflowError
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


# one rule file per stage (bertology_core.workflow.jobs.STAGES); which jobs each makes is data (rules/common.smk)
for stage in job_table.STAGES:

    include: f"rules/{stage}.smk"


rule all:
    default_target: True
    input:
        # what needs no fine-tuned model starts at once, whatever fitness.if_unfit says
        early=EXPERIMENT.early_targets(),
        # a function: under fitness.if_unfit skip or fail, these depend on the fitness checkpoint
        rest=lambda wc: jobs().all_targets(),


onsuccess:
    # How much each stage keeps and how much this run wrote (results/disk_usage.md)
    from bertology_core.data import io
    from bertology_core.workflow import disk

    if Path("results").is_dir():
        table = disk.format_table(disk.disk_usage("results", since=RUN_STARTED))
        io.write_text(table, "results/disk_usage.md")
        print(f"Disk use per stage (also in results/disk_usage.md):\n{table}")
        # every run of every stage, as the rules looked them up (bertology_core.workflow.jobs.Jobs.table), once the
        # verdicts that decide them are known
        if not EXPERIMENT.needs_verdicts or Path(f"{FITNESS_TABLE}.parquet").is_file():
            try:
                jobs().table().write_parquet("results/jobs.parquet")
            except (IncompleteCheckpointException, KeyError):
                # a run that did not build the fitness checkpoint (a single target) under fitness.if_unfit skip or fail
                logger.info("results/jobs.parquet not written: this run did not decide the fitness verdicts")
