"""The smoke workflow's jobs through `--profile profiles/slurm` on a real single-node Slurm cluster (a job or more of every
rule that Slurm gets: :data:`TARGETS`).

The cluster (tests/slurm_cluster.py) is started from Debian's slurm-wlm and munge packages for
this test and torn down by PID after it. `.ci/run` installs the packages; elsewhere the test is
skipped with the reason. The node has two fake GPUs (GRES backed by plain files), so the test
can check which jobs were submitted with `--gpus`. It enforces what each job asks for, as shared
clusters do: a job above its memory request is killed, and one at its time limit; the run meets
both on purpose (:data:`UNDER_ASKING`, :data:`STALLED`) and must finish all the same.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest
import yaml

from bertology_core.jobs import submissions
from conftest import REPO
from slurm_cluster import SlurmCluster, missing_programs
from workflow_utils import SMOKE, assert_same_results, jobs_to_run, snakemake

pytestmark = [
    pytest.mark.workflow,
    pytest.mark.skipif(
        bool(missing_programs()),
        reason=f"Slurm/munge not installed (missing {missing_programs()}); `apt-get install slurm-wlm munge` "
        "(.ci/run does) to run the cluster test",
    ),
]

SUBMISSION_GROUP = "short_model_jobs"  # rules/common.smk, which profiles/slurm's group-components turns on
MODEL_RULES = {"finetune", "evaluate_pretrained", "dump_attention", "labelled_maps", "disabling_sweep", "disabling_greedy",
               "outlier_disabling"}
# run models too (and so ask for a GPU), when the config prunes
PRUNING_MODEL_RULES = {"head_importance", "lottery_pruning", "compact_model", "subnetwork_finetune", "head_gates"}
PROBING_MODEL_RULES = {"probe_features", "syntactic_heads"}
# What the cluster runs: a job or more of every rule that Slurm gets (MRPC's first seed through every model stage; the
# pre-trained encoder's dumps, pattern classes, head roles, linguistic scores, probes and layer mix), with the short
# model jobs' groups, not the whole smoke run: each submission costs a job start (Snakemake parses the workflow again
# on the node) that the local run, which every other workflow test checks whole, does not pay.
TARGETS = (
    "results/disabling/tiny-bert/MRPC/finetuned/seed1/greedy.parquet",
    "results/disabling/tiny-bert/MRPC/finetuned/deltas.parquet",
    "results/outliers/tiny-bert/MRPC/deltas.parquet",
    "results/outliers/tiny-bert/dimensions.parquet",
    "results/pruning/tiny-bert/MRPC/finetuned/seed1/subnetworks/s-good-held_out.json",
    "results/pruning/tiny-bert/MRPC/finetuned/seed1/s_compact.json",
    "results/head_roles/tiny-bert/gates/MRPC/seed1/trained_strength0.1.json",
    "results/head_roles/tiny-bert/MRPC/pretrained.parquet",
    "results/probing/tiny-bert/pretrained/syntactic_heads.parquet",
    "results/probing/tiny-bert/pretrained/probes.parquet",
    "results/layer_mix/tiny-bert/pretrained/summary.parquet",
    "results/patterns/tiny-bert/MRPC/pretrained.classes.parquet",
    "results/patterns/tiny-bert/labelled/MRPC/pretrained.attention.parquet",
    "results/patterns/tiny-bert/annotate.html",
    "results/linguistic/tiny-bert/MRPC/pretrained.features.parquet",
    "results/attention_change/tiny-bert/MRPC/seed1.parquet",
    "results/finetune/tiny-bert/MRPC/pretrained/seed1/metrics.json",
)

# a rule told to ask for less memory than its job takes (a script loading torch: about 700 MB, beside the 300 MB or so of the
# Snakemake process that runs it on the node), so the cluster kills its first attempt; the retry asks for twice as much
UNDER_ASKING = ("disabling_sweep", 700)
# a fine-tuning job stops after its second checkpoint (a failpoint, once in the run) until its two-minute limit ends it
# (every fine-tuning job asks for two minutes here: about 30 s of work with the node's start-up); the retry resumes
# from that checkpoint
STALLED = {"BERTOLOGY_FAILPOINT": "finetune.after_checkpoint@2:hang"}


def local_rules() -> set[str]:
    """The rules the rule files mark ``localrule: True``."""
    found, rule = set(), None
    for path in (REPO / "rules").glob("*.smk"):
        for line in path.read_text().splitlines():
            if match := re.match(r"(?:rule|checkpoint) (\w+):", line):
                rule = match.group(1)
            elif rule and line.strip() == "localrule: True":
                found.add(rule)
    return found


def group_of(name: str) -> str | None:
    """The packing group a submission's name ("<group><n>_<its rules>") shows, if any."""
    match = re.match(rf"({SUBMISSION_GROUP})\d+_", name)
    return match[1] if match else None


def submitted_jobs(cluster: SlurmCluster) -> list[dict[str, str]]:
    """Every job the controller remembers (MinJobAge=7200 s), as scontrol's key=value fields."""
    out = subprocess.run(
        ["scontrol", "show", "job", "--oneliner"], env=cluster.env, capture_output=True, text=True, check=True
    ).stdout
    jobs = []
    for line in out.splitlines():
        if line.strip():
            jobs.append(dict(re.findall(r"(\w+)=(\S*)", line)))
    return jobs


def test_smoke_workflow_on_a_real_slurm_equals_the_local_run(smoke_run, tmp_path):
    started = time.monotonic()
    gpu_config = tmp_path / "gpu.yaml"
    # checkpoint settings and memory requests are not job parameters: the results must equal the local run's
    gpu_config.write_text(yaml.safe_dump({"compute": {"gpus": 1, "mem_mb": {UNDER_ASKING[0]: UNDER_ASKING[1]}},
                                          "finetune": {"checkpoint_steps": 2, "checkpoint_minutes": None}}))
    configs = (SMOKE, gpu_config)
    workdir = tmp_path / "slurm-run"
    with SlurmCluster(tmp_path / "cluster", gpus=2) as cluster:
        cluster_up = time.monotonic() - started
        snakemake(
            workdir, *TARGETS,
            "--profile", str(REPO / "profiles" / "slurm"),
            # this cluster has no accounting daemon and no accounts; poll fast, it is all local
            "--slurm-status-command", "squeue", "--slurm-no-account",
            "--slurm-init-seconds-before-status-checks", "2",
            "--latency-wait", "5",
            "--set-resources", "finetune:runtime=2",
            # the host may reach the Hub; every job on a node is offline all the same (rules/common.smk)
            configs=configs, env={**cluster.env, "HF_HUB_OFFLINE": "0", **STALLED,
                                  "BERTOLOGY_FAILPOINT_ONCE": str(tmp_path / "stalled")},
        )
        jobs = submitted_jobs(cluster)
    seconds = time.monotonic() - started

    # every job but the table and figure jobs ran on Slurm and succeeded, the short model jobs in group submissions (a
    # submission's comment names its group); model jobs and groups of them asked for a GPU, nothing else did
    local, grouped = local_rules(), set(submissions.RULES)
    rules = [group_of(name) or name for name in (job["Comment"].split("_wildcards_")[0].removeprefix("rule_") for job in jobs)]
    states = [(rule, job["JobState"], job.get("MinMemoryNode")) for rule, job in zip(rules, jobs)]
    # the cluster killed the under-asking job at its request (700 MB) and the stalled one at its limit; each retry, and
    # every other job, completed
    under, memory = UNDER_ASKING
    attempts = [(state, mem) for rule, state, mem in states if rule == under]
    assert attempts and sorted(attempts) == sorted([("FAILED", f"{memory}M"), ("COMPLETED", f"{2 * memory}M")]
                                                   * (len(attempts) // 2)), states
    assert [rule for rule, state, _ in states if state == "TIMEOUT"] == ["finetune"], states
    assert all(state == "COMPLETED" for rule, state, _ in states if rule not in (under, "finetune")), states
    killed = [log for log in (workdir / ".snakemake" / "slurm_logs" / f"rule_{under}").rglob("*.log")
              if "Exceeded job memory limit" in log.read_text()]
    assert len(killed) == len(attempts) // 2, "the memory kills are Slurm's"
    [stalled] = [job for rule, job in zip(rules, jobs) if job["JobState"] == "TIMEOUT"]
    resumed = [log for log in (workdir / "logs" / "finetune").rglob("*.log") if "resuming from checkpoint at step 4"
               in log.read_text()]
    assert len(resumed) == 1 and stalled["TimeLimit"] == "00:02:00", (resumed, stalled["TimeLimit"])
    jobs = [job for job in jobs if job["JobState"] == "COMPLETED"]
    rules = [rule for rule, (_, state, _) in zip(rules, states) if state == "COMPLETED"]
    assert {"prepare_data", "baselines", "report", "disabling_summary"} <= local and {"dump_attention", "head_gates"} <= grouped
    # every rule the local run ran that is neither a table job nor packed went to Slurm (check_model: Hub models only);
    # at the smoke run's sizes every short model job is short, so all of them went in packed submissions
    ran_locally = {path.name.removesuffix(".tsv") for path in (smoke_run / "results" / "benchmarks").iterdir()}
    assert set(rules) == (ran_locally - local - grouped) | {SUBMISSION_GROUP}, set(rules) ^ (ran_locally - local)
    assert not set(rules) & (local | grouped), "a table job or a short model job was submitted alone"
    # the short model jobs (as many as the run benchmarked) went in fewer submissions than jobs, each of one model and
    # task, and each asking for about compute.submission_minutes (a last bin under half of it joins the one before)
    short_jobs = sum(len(list((workdir / "results" / "benchmarks" / rule).rglob("*.tsv"))) for rule in grouped)
    packed = [job for rule, job in zip(rules, jobs) if rule == SUBMISSION_GROUP]
    assert 0 < len(packed) < short_jobs / 2, (len(packed), short_jobs)
    limit = yaml.safe_load((REPO / "config.yaml").read_text())["compute"]["submission_minutes"]
    asked = [int(job["TimeLimit"].split(":")[0]) * 60 + int(job["TimeLimit"].split(":")[1]) for job in packed]
    assert max(asked) <= 1.5 * limit, asked
    gpu_rules = MODEL_RULES | PRUNING_MODEL_RULES | PROBING_MODEL_RULES | {SUBMISSION_GROUP}
    for rule, job in zip(rules, jobs):
        asks_gpu = "gpu" in job.get("TresPerJob", "") + job.get("TresPerNode", "")
        assert asks_gpu == (rule in gpu_rules), (rule, job.get("TresPerJob"), job.get("TresPerNode"))
    assert sum(jobs_to_run(smoke_run, (SMOKE,)).values()) == 0  # the local run is complete: nothing to compare it by
    # every job on the node ran with the Hub offline; the model was resolved on the host, which may reach it
    on_nodes = (set(rules) - {SUBMISSION_GROUP}) | grouped
    node_logs = [log for rule in on_nodes for log in (workdir / "logs" / rule).rglob("*.log")]
    assert len(node_logs) >= len(jobs) and all("Hugging Face Hub: offline" in log.read_text() for log in node_logs)
    assert "resolve_model" in local and "Hugging Face Hub: online" in (workdir / "logs" / "resolve_model" / "tiny-bert.log").read_text()

    # the same results as the local run of the same config (compute.gpus changes no result), every target among them
    compared = assert_same_results(smoke_run, workdir, partial=True)
    assert compared > 30 and all((workdir / target).exists() for target in TARGETS)
    print(f"slurm: cluster up in {cluster_up:.1f} s, {len(jobs)} jobs, whole test {seconds:.1f} s, "
          f"{compared} result files identical to the local run; {short_jobs} short model jobs in {len(packed)} "
          f"submissions asking for {sorted(asked)} minutes")
