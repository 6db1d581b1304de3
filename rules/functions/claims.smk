# The claims stage's input functions, report section, targets and checks; its rules are in
# rules/claims.smk (Snakemake's linter asks rules and functions to live in separate files).


def claims_inputs(wildcards):
    """Every per-example or per-element table the claims resample, from the stages this config runs."""
    model = wildcards.model
    dumped = dumped_fine_tuned(model)
    swept = [(task, state) for task, state in disabling_task_states(model) if state == states.FINETUNED]
    inputs = {
        "fitness": fitness_inputs(),
        "report": f"results/patterns/{model}/classifier/report.json",
        "classes": [f"results/patterns/{model}/{task}/{states.seeded(states.FINETUNED, seed)}.classes.parquet" for task, seed in dumped],
        "changes": [f"results/attention_change/{model}/{task}/seed{seed}.examples.parquet" for task, seed in attention_change_runs(model)],
        "selection": [f"results/disabling/{model}/{task}/{state}/selection.parquet" for task, state in swept],
        "deltas": [f"results/disabling/{model}/{task}/{state}/deltas.parquet" for task, state in swept],
        "michel_curves": [f"{pruning_dir(model, t, s)}/michel_curve.parquet" for t, s in pruning_runs(model)],
        "michel_predictions": [f"{pruning_dir(model, t, s)}/michel_predictions.parquet" for t, s in pruning_runs(model)],
    }
    if pruning_runs(model):
        inputs["stability"] = f"results/pruning/{model}/summary/stability.parquet"
    if states.PRETRAINED in syntactic_head_states(model):
        inputs["syntactic"] = f"results/probing/{model}/{states.PRETRAINED}/syntactic_heads_held_out.parquet"
    if head_role_dumps(model):
        inputs["role_relations"] = f"results/head_roles/{model}/summary/importance_relations.parquet"
        inputs["gates"] = f"results/head_roles/{model}/summary/gates.parquet"
    inputs["outlier_contrast"] = [f"results/outliers/{model}/{task}/contrast.parquet" for task in outlier_tasks(model)]
    if states.PRETRAINED in layer_mix_states(model):
        inputs["mix_words"] = f"results/layer_mix/{model}/{states.PRETRAINED}/words.parquet"
    if states.PRETRAINED in probing_states(model):
        inputs["probe_words"] = f"results/probing/{model}/{states.PRETRAINED}/probe_words.parquet"
    return inputs


# the stages whose results the claims read (bertology_core/report/claims.py names them so), not every registered stage:
# a new stage does not rerun the claims
CLAIMED_SECTIONS = ("patterns", "change", "disabling", "pruning", "probing", "roles", "outliers", "layer_mix")


def claims_runs(model):
    """What the claims script needs to read its inputs: the (task, seed) of each per-model file, the seeds each
    per-task table pools, and what each stage did (ran, skipped by analysis.unfit, not run)."""
    return {
        "classes": dumped_fine_tuned(model),
        "changes": attention_change_runs(model),
        "pruned": pruning_runs(model),
        "swept_seeds": {task: swept_seeds(model, task, states.FINETUNED) for task in TASKS if states.FINETUNED in disabling_states()},
        "pruned_seeds": {task: [s for t, s in pruning_runs(model) if t == task] for task in TASKS},
        "stages": {
            section: "skipped" if section in skipped_sections(model) else "ran" if stage_runs(model, section) else "not run"
            for section in CLAIMED_SECTIONS
        },
    }


declare_section("claims", shows=lambda model: sorted(set(dumped_runs(model) + disabling_runs(model) + SECTIONS["pruning"].shows(model))))


@check("choices")


def claims_level_problems():
    """The claims read the intervals the stages computed: each must be at claims.level, which the verdicts assume."""
    level = config["claims"]["level"]
    stage_levels = {"disabling.level": config["disabling"]["level"], "pruning.kappa_level": config["pruning"]["kappa_level"],
                    "probing.syntactic_heads.level": config["probing"]["syntactic_heads"]["level"],
                    "head_roles.level": config["head_roles"]["level"], "outliers.level": config["outliers"]["level"],
                    "layer_mix.level": config["layer_mix"]["level"]}
    differing = {key: value for key, value in stage_levels.items() if value != level}
    return [f"{', '.join(f'{k}: {v}' for k, v in differing.items())} differ from claims.level ({level}): the claims' verdicts "
            "read those stages' intervals as intervals at claims.level. Fix: set them to the same level."] if differing else []
