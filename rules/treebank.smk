# Universal Dependencies treebank splits, validated and normalised to Parquet (one row per sentence).


rule prepare_treebank:
    conda:
        "../envs/tables.yaml"
    input:
        lambda wc: EXPERIMENT.treebank_file(wc.split),
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
        **requests("prepare_treebank"),
    script:
        "../workflow_scripts/prepare_treebank.py"


rule download_treebank:
    # a table job: where Snakemake runs, not in a cluster's queue
    localrule: True
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
        **requests("download_treebank"),
    script:
        "../workflow_scripts/download_treebank.py"
