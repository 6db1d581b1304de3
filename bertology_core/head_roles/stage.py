"""The head_roles stage's declaration (Voita et al. 2019): the head roles of every dump and the L0 head gates of the
pruned models, its config checks, its section and the summary's inputs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertology_core.data import states
from bertology_core.head_roles import corpus_tables
from bertology_core.jobs.experiment import FITNESS_TABLE, Fit, GateJob, ModelRuns, Stage, Verdicted
from bertology_core.jobs.sections import BOTH, Section, SectionRuns, Summary

# the head gates of one pruned model (trained beside Michel et al.'s curve of that model)
GATE_DIR = "results/head_roles/{model}/gates/{task}/seed{seed}"


class HeadRoles(Stage):
    section = Section("head_roles", (
        Summary("roles", "head_roles/{model}/summary/roles", BOTH, ("figure",)),
        Summary("relations", "head_roles/{model}/summary/importance_relations", BOTH, BOTH,
                title='Role measures against head importance and disabling (Spearman over heads)'),
        Summary("gates", "head_roles/{model}/summary/gates", BOTH, BOTH,
                title="L0 head gates against Michel et al.'s ordering at the same number of heads"),
    ), title='Head roles and learned head gates (Voita et al. 2019)')
    claimed = True
    # memory (bertology_core/jobs/needs.py): it reads the dump a chunk of examples at a time, but a chunk grows with
    # the examples' lengths and its counts with the dump (615 to 1,050 MB from QQP's dump to QNLI's, measured). A
    # frequency corpus is an input too, so its bytes count in what a job reads, as the time to tokenise it grows with
    # them; its memory does not (read a line at a time), so a large corpus makes the memory request larger than needed.
    # The lines were fitted on jobs without a corpus: refit after a run with one (tools/fit_needs.py)
    memory = {"head_roles": "holds"}
    # the roles read the attention dumps; the gates, the pruned models
    reads = ("attention", "pruning")

    def runs(self, model: str, fit: Fit, found: Mapping[str, Any]) -> dict[str, Any]:
        """``gated``: the pruned models (task, seed) that gates.tasks and gates.seeds choose; ``gates``: one training
        per gated model, weights and strength."""
        gates = self.settings()["gates"]
        gated = [(task, seed) for task, seed in found["pruned"]
                 if (gates["tasks"] is None or task in gates["tasks"]) and (gates["seeds"] is None or seed in gates["seeds"])]
        # a penalty strength as paths spell it: Python's shortest round-trip form (0.01, 0.3, 1e-05)
        jobs = [(task, seed, weights, repr(float(strength))) for task, seed in gated
                for weights in gates["encoder"] for strength in gates["strengths"]]
        return {"gated": gated, "gates": jobs}

    def frequency_corpus(self) -> Path | None:
        """The text file the rare-token role counts word pieces on (``frequency_corpus``, relative paths from the
        repository); None: each task's training split."""
        configured = self.settings()["frequency_corpus"]
        return None if configured is None else self.experiment.repo_path(configured)

    def frequency_inputs(self, wildcards: Any) -> dict[str, str]:
        """The head_roles job's input the pieces are counted on: the corpus file where set (so that editing it reruns
        the roles), else the task's prepared training split."""
        corpus = self.frequency_corpus()
        return {"train": f"results/data/{wildcards.task}/train.parquet"} if corpus is None else {"frequency_corpus": str(corpus)}

    def frequency_source(self) -> str:
        """What the roles table's ``frequency_source`` says (:func:`corpus_tables.source_name`)."""
        return corpus_tables.source_name(self.settings()["frequency_corpus"])

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        shows = sorted(set(runs.dumped_runs) | {(t, states.FINETUNED, s) for t, s in runs.gated})
        return SectionRuns(bool(runs.dumps), shows, bool(runs.dumped_runs or runs.gated))

    def problems(self) -> list[str]:
        """Gate tasks and seeds must be pruned ones: the gates are compared with Michel et al.'s curve of the same model;
        a frequency corpus must be a non-empty UTF-8 text file."""
        gates, experiment, pruning = self.settings()["gates"], self.experiment, self.experiment.pruning
        pruned = pruning.tasks()
        problems = experiment.named_task_problems({"head_roles.gates.tasks": gates["tasks"]})
        # the corpus is read by every roles job: a wrong path stops the run here, not after the dumps
        if (corpus := self.frequency_corpus()) is not None:
            problems += corpus_tables.problems(corpus, self.settings()["frequency_corpus"])
        for task in [t for t in gates["tasks"] or [] if t in experiment.tasks]:
            if task not in pruned:
                problems.append(f"head_roles.gates.tasks names {task}, which is not pruned (pruning.tasks: "
                                f"{self.config['pruning']['tasks']}): the gates are compared with Michel et al.'s curve of the "
                                "same model. Fix: add it to pruning.tasks or drop it.")
            elif gates["seeds"] is not None and not set(gates["seeds"]) & set(pruning.seeds(task)):
                problems.append(f"head_roles.gates.seeds {gates['seeds']} names no pruned seed of {task} "
                                f"({pruning.seeds(task)}). Fix: use one of them or set seeds: null.")
        candidates = [task for task in pruned if gates["tasks"] is None or task in gates["tasks"]]
        if candidates and gates["seeds"] is not None and not any(set(gates["seeds"]) & set(pruning.seeds(t)) for t in candidates):
            problems.append(f"head_roles.gates.seeds {gates['seeds']} names no seed that is pruned (pruning seeds: "
                            f"{ {task: pruning.seeds(task) for task in pruned} }): no gates would be trained. "
                            "Fix: name a pruned seed, set seeds: null, or tasks: [] for no gates.")
        if gates["tasks"] != [] and pruned and self.config["pruning"]["michel_recompute"]:
            problems.append("head_roles.gates are compared with Michel et al.'s order computed once (the curve without "
                            "recomputation), but pruning.michel_recompute is true. Fix: set pruning.michel_recompute: false, "
                            "or head_roles.gates.tasks: [] for no gates.")
        if gates["tasks"] != [] and pruned and not self.config["attention"]["dumped"]:
            problems.append("head_roles.gates are summarised with the head roles of the attention dumps, and attention.dumped "
                            "is empty. Fix: dump a state (attention.dumped: [pretrained, finetuned]) or set head_roles.gates.tasks: [].")
        low, high = gates["stretch"]
        if not (low < 0 and high > 1):
            problems.append(f"head_roles.gates.stretch {gates['stretch']}: the L0 penalty needs low < 0 and high > 1 "
                            "(Louizos et al.). Fix: use [-0.1, 1.1].")
        return problems

    @staticmethod
    def gate_file(model: str, job: GateJob, suffix: str) -> str:
        task, seed, weights, strength = job
        return f"{GATE_DIR.format(model=model, task=task, seed=seed)}/{weights}_strength{strength}.{suffix}"

    def summary_inputs(self, jobs: Verdicted, model: str) -> dict[str, Any]:
        runs, pruning = jobs.of(model), self.experiment.pruning
        swept = [(task, state) for task, state in runs.disabling_task_states if state == states.FINETUNED]
        return {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "roles": [f"results/head_roles/{model}/{key}.parquet" for key in runs.dump_keys],
            # Voita et al.'s token-level accuracy per relation and direction (the syntactic role)
            "voita": [f"results/probing/{model}/{state}/syntactic_heads_voita.parquet" for state in runs.syntactic_heads],
            "importance": [f"{pruning.folder(model, t, s)}/importance.parquet" for t, s in runs.pruned],
            "deltas": [f"results/disabling/{model}/{task}/{state}/deltas.parquet" for task, state in swept],
            # in the order of summary_runs' keys, which the summary pairs them with
            "michel": [f"{pruning.folder(model, t, s)}/michel_curve.parquet" for t, s in runs.gate_curves],
            "gates": [self.gate_file(model, job, "json") for job in runs.gates],
            "gate_predictions": [self.gate_file(model, job, "predictions.parquet") for job in runs.gates],
            "dev": sorted({f"results/data/{t}/dev.parquet" for t, _, _, _ in runs.gates}),
        }

    @staticmethod
    def summary_runs(jobs: Verdicted, model: str) -> dict[str, list[Any]]:
        """What the head roles summary needs to read its inputs: the key of each per-run file, in input order."""
        runs = jobs.of(model)
        return {"roles": runs.dump_keys, "importance": runs.pruned, "michel": runs.gate_curves, "gates": runs.gates}
