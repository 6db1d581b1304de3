# The attention change stage's input functions, report section, targets and checks; its rules are in
# rules/attention_change.smk (Snakemake's linter asks rules and functions to live in separate files).


def attention_change_runs(model):
    """(task, seed) pairs whose fine-tuned model is compared with the pre-trained encoder (Kovaleva et al. section 4.3)."""
    if not {states.PRETRAINED, states.FINETUNED} <= set(config["attention"]["dumped"]) or states.FINETUNED not in TRAINED_STATES:
        return []
    return [(task, seed) for task in TASKS for seed in SEEDS if analysed(model, task, states.FINETUNED, seed)]


declare_section("change", runs=lambda model: bool(attention_change_runs(model)),
                shows=lambda model: [(task, states.FINETUNED, seed) for task, seed in attention_change_runs(model)],
                analyses_fine_tuned=lambda model: bool(attention_change_runs(model)))
