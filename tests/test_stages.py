"""Adding a stage: its rule file, script, section text and package (bertology_core/<stage>/stage.py: its section and
summaries, when it runs) are new files; the one shared file of code it changes is the list of stages
(bertology_core/workflow/jobs.py, STAGES), plus its settings in the config schema. The Snakefile includes it by its
name."""

from __future__ import annotations

import filecmp
import shutil
import subprocess

import polars as pl
import pytest

from conftest import REPO
from workflow_utils import SMOKE, jobs_to_run, snakemake

pytestmark = pytest.mark.workflow

TOY_RULES = '''# A test-only stage: the label counts of each task's dev split.


rule toy_summary:
    conda:
        "../envs/tables.yaml"
    input:
        dev=expand("results/data/{task}/dev.parquet", task=EXPERIMENT.tasks),
    output:
        **summary_outputs("toy", "results/toy/{model}/summary/counts"),
    params:
        code=script_code("toy_summary"),
        min_count=config["toy"]["min_count"],
    log:
        "logs/toy_summary/{model}.log",
    script:
        "../workflow_scripts/toy_summary.py"
'''

TOY_SCRIPT = '''"""Label counts of each task's dev split (rule toy_summary, a test-only stage)."""

from _common import log_to

log_to(snakemake.log[0])

import polars as pl

from bertology_core.summaries import figures

counts = pl.concat([pl.read_parquet(path).group_by(pl.col("label").cast(pl.String)).len().with_columns(pl.lit(path).alias("split")) for path in snakemake.input.dev])
counts = counts.filter(pl.col("len") >= snakemake.params.min_count).sort("split", "label")
figures.write_table(counts, snakemake.output.counts[0].removesuffix(".parquet"))
'''

TOY_STAGE = '''"""The toy stage's declaration: its section, which runs when toy.enabled."""

from bertology_core.jobs.experiment import ModelRuns, Stage, Verdicted
from bertology_core.jobs.sections import Section, SectionRuns, Summary


class Toy(Stage):
    section = Section("toy", (Summary("counts", "toy/{model}/summary/counts"),))

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        return SectionRuns(self.settings()["enabled"], [], None)
'''

TOY_SCHEMA = '''  toy:
    type: object
    additionalProperties: false
    default: {}
    description: A test-only stage (tests/test_stages.py).
    properties:
      enabled: {type: boolean, default: true, description: Whether the stage runs.}
      min_count: {type: integer, minimum: 0, default: 1, description: Labels with fewer dev examples are left out.}
'''


def _tracked_files(root):
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=root, capture_output=True, text=True, check=True)
    return [line for line in listed.stdout.splitlines() if (root / line).is_file()]


@pytest.fixture(scope="module")
def repo_with_toy_stage(tmp_path_factory):
    """A copy of the repository with a new stage added the way docs/development.md says: new files (its package declares its
    section and when it runs), its name in the list of stages and one section of the schema."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs the repository's git checkout to copy its files")
    copy = tmp_path_factory.mktemp("repo")
    for name in _tracked_files(REPO):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, copy / name)
    (copy / "rules" / "toy.smk").write_text(TOY_RULES)
    (copy / "workflow_scripts" / "toy_summary.py").write_text(TOY_SCRIPT)
    (copy / "report" / "sections" / "toy.rst").write_text("Label counts of each task's dev split (a test-only stage).\n")
    (copy / "bertology_core" / "toy").mkdir()
    (copy / "bertology_core" / "toy" / "__init__.py").write_text("")
    (copy / "bertology_core" / "toy" / "stage.py").write_text(TOY_STAGE)
    listed = copy / "bertology_core" / "workflow" / "jobs.py"
    text = listed.read_text()
    # its one name, after the report's
    assert text.count('"claims", "report")') == 1
    listed.write_text(text.replace('"claims", "report")', '"claims", "report", "toy")'))
    with open(copy / "schemas" / "config.schema.yaml", "a") as schema:
        schema.write(TOY_SCHEMA)
    return copy


def test_the_toy_stage_changes_only_new_files_the_list_of_stages_and_the_schema(repo_with_toy_stage):
    original = set(_tracked_files(REPO))
    copied = {path.relative_to(repo_with_toy_stage).as_posix() for path in repo_with_toy_stage.rglob("*") if path.is_file()}
    assert copied - original == {"rules/toy.smk", "workflow_scripts/toy_summary.py", "report/sections/toy.rst",
                                 "bertology_core/toy/__init__.py", "bertology_core/toy/stage.py"}
    changed = {name for name in original if not filecmp.cmp(REPO / name, repo_with_toy_stage / name, shallow=False)}
    assert changed == {"bertology_core/workflow/jobs.py", "schemas/config.schema.yaml"}


def test_a_new_stage_joins_the_dag_the_report_and_rule_all_from_its_own_files(repo_with_toy_stage, tmp_path):
    snakefile = repo_with_toy_stage / "Snakefile"
    before = jobs_to_run(tmp_path / "before")
    after = jobs_to_run(tmp_path / "after", snakefile=snakefile)
    # rule all asks for the new stage's summary: one job more, nothing else changed
    assert after == {**before, "toy_summary": 1}
    # the report page waits for it (its section declared it shows the table)
    planned = snakemake(tmp_path / "after", "-n", "results/report/index.html", snakefile=snakefile).stdout
    assert "rule toy_summary:" in planned or "toy_summary" in planned.split("Job stats:")[1]
    # its config section (from the schema's defaults) decides whether it runs
    off = tmp_path / "off.yaml"
    off.write_text("toy: {enabled: false}\n")
    assert "toy_summary" not in jobs_to_run(tmp_path / "off", (SMOKE, off), snakefile=snakefile)


def test_the_new_stage_runs_shows_on_the_page_and_registers_its_table_with_snakemakes_report(repo_with_toy_stage, smoke_run,
                                                                                             tmp_path):
    """On a copy of the smoke run: the new stage's job and the page are all that run, and the page shows its section."""
    snakefile = repo_with_toy_stage / "Snakefile"
    workdir = tmp_path / "run"
    shutil.copytree(smoke_run, workdir, symlinks=True)
    # the copy of the repository holds the smoke data and model under another absolute path: compare the rest
    triggers = ("--rerun-triggers", "mtime", "params", "code")
    assert jobs_to_run(workdir, (SMOKE,), *triggers, snakefile=snakefile) == {"toy_summary": 1, "report": 1, "all": 1}
    snakemake(workdir, *triggers, snakefile=snakefile)
    counts = pl.read_parquet(workdir / "results" / "toy" / "tiny-bert" / "summary" / "counts.parquet")
    dev_examples = sum(pl.read_parquet(workdir / "results" / "data" / task / "dev.parquet").height for task in ("MRPC", "STS-B"))
    assert counts["len"].sum() == dev_examples
    page = (workdir / "results" / "report" / "index.html").read_text()
    section = page.split('<section id="toy">', 1)[1].split("</section>", 1)[0]  # after the layout's sections
    assert "<h2>Toy</h2>" in section and "Label counts of each task&#x27;s dev split" in section and "<h3>Counts</h3>" in section
    assert page.index('<section id="report">') < page.index('<section id="toy">')
    import zipfile

    snakemake(workdir, "--report", str(tmp_path / "report.zip"), "results/toy/tiny-bert/summary/counts.csv", snakefile=snakefile)
    names = zipfile.ZipFile(tmp_path / "report.zip").namelist()
    assert any(name.endswith("/counts.csv") for name in names), names
