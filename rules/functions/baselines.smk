# The baselines stage's input functions, report section, targets and checks; its rules are in
# rules/baselines.smk (Snakemake's linter asks rules and functions to live in separate files).


def metrics_files(model):
    """The metrics.json of every run of the baselines table: the pre-trained encoder's (top-level seeds) and every
    fine-tuned run."""
    pretrained = [(task, states.PRETRAINED, seed) for task in TASKS for seed in SEEDS] if states.PRETRAINED in FINETUNE_STATES else []
    return [f"{run_dir(model, t, s, seed)}/metrics.json" for t, s, seed in pretrained + fine_tuned_runs()]


declare_section("baselines", shows=lambda model: fine_tuned_runs(), summaries=[("table", "tables/{model}/baselines")])
