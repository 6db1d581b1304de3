# The linguistic stage's input functions, report section, targets and checks; its rules are in
# rules/linguistic.smk (Snakemake's linter asks rules and functions to live in separate files).


def linguistic_inputs(wildcards):
    """Every dump's linguistic score tables, by kind (inputs of linguistic_summary)."""
    return {
        kind: [f"results/linguistic/{wildcards.model}/{key}.{kind}.parquet" for key in dump_keys(wildcards.model)]
        for kind in ("features", "relations", "cls_shares", "cls_max")
    } | {"fitness": fitness_inputs()}


declare_section("linguistic", shows=dumped_runs)


declare_section("cls", shows=dumped_runs)
