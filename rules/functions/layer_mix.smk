# The layer mix stage's input functions, report section and checks; its rules are in rules/layer_mix.smk
# (Snakemake's linter asks rules and functions to live in separate files).


def layer_mix_states(model):
    """Probed states that get Tenney et al.'s measures: layer_mix.states among the probed ones (null: all of them)."""
    chosen = config["layer_mix"]["states"]
    probed = probing_states(model)
    return probed if chosen is None else [state for state in probed if state in chosen]


def layer_mix_fine_tuned(model):
    """(task, state, seed) of the fine-tuned models among the layer mix states."""
    return [(t, states.FINETUNED, s) for t, s in probed_states(model) if states.seeded(t, s) in layer_mix_states(model)]


declare_section("layer_mix", runs=lambda model: bool(layer_mix_states(model)), shows=layer_mix_fine_tuned,
                analyses_fine_tuned=lambda model: bool(layer_mix_fine_tuned(model)))


@check("choices")


def layer_mix_choice_problems():
    """layer_mix.states must name states the probing stage probes."""
    chosen = config["layer_mix"]["states"]
    if not chosen or not TREEBANK_SPLITS:
        return []
    with ungated():
        probed = set().union(*(probing_states(model) for model in MODELS))
    missing = [state for state in chosen if state not in probed]
    return [f"layer_mix.states names {missing}, which the probing stage does not probe (probed: {sorted(probed)}). "
            "Fix: choose among them (probing.states, probing.tasks, probing.seeds decide what is probed) or set "
            "layer_mix.states: null."] if missing else []
