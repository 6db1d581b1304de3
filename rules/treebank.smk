# Universal Dependencies treebank splits, validated and normalised to Parquet (one row per sentence).


TREEBANK_DOWNLOADED = "results/treebank/source"


def treebank_file(split):
    """A split's CoNLL-U file: in treebank.dir, or downloaded from treebank.url (rule download_treebank)."""
    name = config["treebank"]["files"][split]
    return Path(TREEBANK_DOWNLOADED) / name if config["treebank"]["url"] else repo_path(config["treebank"]["dir"]) / name


if config["treebank"]["dir"] and config["treebank"]["url"]:
    raise WorkflowError("config 'treebank': both dir and url are set. Fix: set the one the files come from, the other to null.")


TREEBANK_SPLITS = list(config["treebank"]["files"]) if config["treebank"]["dir"] or config["treebank"]["url"] else []


_missing = [str(treebank_file(s)) for s in TREEBANK_SPLITS if config["treebank"]["dir"] and not treebank_file(s).is_file()]


if _missing:
    raise WorkflowError(
        "config 'treebank': CoNLL-U file(s) not found:\n  " + "\n  ".join(_missing)
        + "\nFix: point treebank.dir (and treebank.files) at a UD treebank, e.g. a checkout of "
        "UD_English-EWT, or set treebank.dir: null to skip the treebank stages."
    )


@check("data")
def treebank_problems():
    """Format and encoding of the local CoNLL-U files (downloads: checked by prepare_treebank)."""
    problems = []
    for split in TREEBANK_SPLITS if config["treebank"]["dir"] else []:
        try:
            treebank.validate(treebank_file(split))
        except treebank.TreebankError as error:
            problems.append(str(error))
    return problems


# the treebank's splits: parsed from no model, scheduled before the fitness checkpoint
TARGETS.append(lambda model: [f"results/treebank/{split}.parquet" for split in TREEBANK_SPLITS])
EARLY_TARGETS.append(lambda model: [f"results/treebank/{split}.parquet" for split in TREEBANK_SPLITS])

rule prepare_treebank:
    conda:
        "../envs/tables.yaml"
    input:
        lambda wc: treebank_file(wc.split),
    output:
        "results/treebank/{split}.parquet",
    wildcard_constraints:
        split="train|dev|test",
    params:
        code=script_code("prepare_treebank"),
        max_sentences=config["treebank"]["max_sentences"],
    # validation jobs first: a broken file fails the run before any model job starts
    priority: 100
    log:
        "logs/prepare_treebank/{split}.log",
    benchmark:
        "results/benchmarks/prepare_treebank/{split}.tsv"
    resources:
        mem_mb=scaled(4000),
        runtime=scaled(30),
    script:
        "../workflow_scripts/prepare_treebank.py"


rule download_treebank:
    # treebank.url: each file once, checked against treebank.sha256
    conda:
        "../envs/tables.yaml"
    output:
        f"{TREEBANK_DOWNLOADED}/{{file}}",
    wildcard_constraints:
        file="|".join(re.escape(name) for name in config["treebank"]["files"].values()),
    params:
        code=script_code("download_treebank"),
        url=lambda wc: config["treebank"]["url"].format(file=wc.file),
        sha256=lambda wc: config["treebank"]["sha256"].get(wc.file),
    priority: 100
    log:
        "logs/download_treebank/{file}.log",
    resources:
        mem_mb=scaled(1000),
        runtime=scaled(30),
    script:
        "../workflow_scripts/download_treebank.py"
