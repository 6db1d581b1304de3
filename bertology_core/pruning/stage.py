"""The pruning stage's declaration (Michel et al. 2019, Prasanna et al. 2020): the pruned models (and the seeds it
adds to fine-tuning), head importance's and the lottery searches' settings, the re-fine-tuned subnetworks, its config
checks, its section and the summary's inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bertology_core.data import states
from bertology_core.jobs.experiment import FITNESS_TABLE, Fit, ModelRuns, Stage, Verdicted
from bertology_core.jobs.sections import BOTH, Section, SectionRuns, Summary

# one pruned model's folder: the models fine-tuned from the pre-trained encoder are pruned (state finetuned)
PRUNE_DIR = f"results/pruning/{{model}}/{{task}}/{states.FINETUNED}/seed{{seed}}"
# the config key of each use's importance granularity: each paper's ranking as its authors' code computes it
IMPORTANCE_GRANULARITY = {"michel": "importance_granularity", "ticket": "ticket_importance_granularity"}


class Pruning(Stage):
    section = Section("pruning", (
        Summary("importance", "pruning/{model}/summary/importance", BOTH, ("figure",)),
        Summary("michel", "pruning/{model}/summary/michel", BOTH, ("figure",)),
        Summary("curves", "pruning/{model}/summary/lottery_curves", BOTH, ("figure",)),
        Summary("survival", "pruning/{model}/summary/survival", BOTH, ("figure",)),
        Summary("lottery", "pruning/{model}/summary/lottery",
                title='Lottery tickets: full, good, random and bad subnetworks',
                note=('The good, random and bad rows are there when pruning.subnetworks lists them (on the CPU profile:'
                      " add configs/cpu_subnetworks.yaml); 'full' is the fine-tuned model. A seed whose pruning removed"
                      " nothing has no ticket and is left out of its method's rows (the seeds column counts the rest; "
                      "the note's first part names them). protocol: 'selected on half A, reported on half B' chooses "
                      'each ticket (where the 90% rule stops) on a seeded half of dev and scores every row on the other'
                      " half; 'paper: selected and reported on all of dev' is Prasanna et al.'s protocol "
                      '(pruning.dev_chosen_tickets). half_a/half_b/dev: each network on each set. minus_held_out: the '
                      "reported score minus the held-out protocol's (report set, ticket and re-fine-tuning run all "
                      'differ); half_b_minus_held_out: both on half B, which the held-out ticket never saw, so only the'
                      ' ticket differs (0 for the full model).')),
        Summary("lottery_seeds", "pruning/{model}/summary/lottery_seeds",
                title='Lottery tickets per seed, under each protocol',
                note=("One row per seed, method, subnetwork and protocol: score on the protocol's report examples "
                      '(examples), on half A, half B and all of dev, share of parameters kept, minus_held_out (the '
                      "score minus the held-out protocol's for the same seed) and half_b_minus_held_out (both on half "
                      'B).')),
        Summary("stability", "pruning/{model}/summary/stability",
                title="Stability of the masks across seeds (Fleiss' kappa)",
                note=("Masks of the held-out tickets (chosen on half A of dev); Fleiss' kappa with seeds as raters and "
                      'a bootstrap interval over the masked elements.')),
        Summary("compact", "pruning/{model}/summary/compact",
                title='Compacted models'),
    ), title='Head importance and pruning')
    claimed = True

    @staticmethod
    def folder(model: str, task: str, seed: int | str) -> str:
        return PRUNE_DIR.format(model=model, task=task, seed=seed)

    # -- which models are pruned --

    def tasks(self) -> list[str]:
        """The tasks whose models fine-tuned from the pre-trained encoder are pruned."""
        wanted = self.settings()["tasks"]
        if states.FINETUNED not in self.experiment.trained_states:
            return []
        return [task for task in self.experiment.tasks if wanted is None or task in wanted]

    def seeds(self, task: str) -> list[int]:
        """The seeds configured for a task's pruning (fine-tuned for it whether or not they are analysed)."""
        pruning = self.settings()
        return pruning["per_task"].get(task, {}).get("seeds") or pruning["seeds"] or self.experiment.seeds

    def subnetwork_seeds(self, task: str) -> list[int]:
        """Pruned seeds whose subnetworks are re-fine-tuned (pruning.per_task.<TASK>.subnetwork_seeds; null: all)."""
        wanted = self.settings()["per_task"].get(task, {}).get("subnetwork_seeds")
        return self.seeds(task) if wanted is None else list(wanted)

    def fine_tuned_seeds(self, task: str, state: str, probing: bool) -> set[int]:
        return set(self.seeds(task)) if state == states.FINETUNED and task in self.tasks() else set()

    def runs(self, model: str, fit: Fit, found: Mapping[str, Any]) -> dict[str, Any]:
        """``pruned``: every analysed (task, seed) of the pruned tasks; ``subnetworks``: (task, seed, network) of the
        re-fine-tuned subnetworks of those seeds."""
        pruned = [(task, seed) for task in self.tasks() for seed in self.seeds(task) if fit(task, states.FINETUNED, seed)]
        networks = self.subnetwork_names()
        return {"pruned": pruned, "subnetworks": [(t, s, n) for t, s in pruned if s in self.subnetwork_seeds(t) for n in networks]}

    def section_runs(self, jobs: Verdicted, model: str, runs: ModelRuns) -> SectionRuns:
        return SectionRuns(bool(runs.pruned), [(task, states.FINETUNED, seed) for task, seed in runs.pruned], bool(runs.pruned))

    # -- each job's settings --

    def importance_data(self, task: str) -> str:
        return f"results/data/{task}/{self.settings()['importance_split']}.parquet"

    def params(self, use: str = "michel") -> dict[str, Any]:
        """The importance settings of a job: ``michel`` (head_importance: Michel et al.'s curve and importance.parquet,
        at ``pruning.importance_granularity``) or ``ticket`` (s-pruning's lottery search, at
        ``pruning.ticket_importance_granularity``), under the one key ``importance_granularity``, so that each job
        depends on its own granularity only. The batch size only under batch granularity, whose batches it makes
        (elsewhere it changes speed only, so changing it reruns nothing)."""
        pruning = self.settings()
        granularity = pruning[IMPORTANCE_GRANULARITY[use]]
        # the keys in the order they always had: a job's recorded params stay the same where its settings did
        return {"importance_split": pruning["importance_split"], "importance_examples": pruning["importance_examples"],
                "importance_granularity": granularity, "normalize_by_layer": pruning["normalize_by_layer"],
                "subsample_seed": self.config["data"]["subsample_seed"],
                "importance_batch_size": pruning["batch_size"] if granularity == "batch" else None}

    def dev_sample(self) -> dict[str, Any]:
        """The dev examples that score pruning decisions: a seeded subsample, or all of dev (examples null)."""
        return {"examples": self.settings()["dev_examples"], "seed": self.config["data"]["subsample_seed"]}

    def lottery_protocols(self) -> list[str]:
        """How lottery tickets are chosen and reported: held_out (chosen on half A of dev, reported on half B)
        always; paper (Prasanna et al.'s: chosen and reported on dev) beside it with pruning.dev_chosen_tickets."""
        return ["held_out"] + (["paper"] if self.settings()["dev_chosen_tickets"] else [])

    def lottery_split(self, protocol: str) -> dict[str, int]:
        """What a protocol's halves of dev depend on (so that only its jobs rerun): the split seed for held_out."""
        return {"split_seed": self.settings()["split_seed"]} if protocol == "held_out" else {}

    def lottery_method(self, method: str) -> dict[str, Any]:
        """The settings of magnitude (m) or structured (s) pruning."""
        pruning = self.settings()
        if method == "m":
            return {"rate": pruning["m_rate"], "max_iterations": pruning["m_max_iterations"]}
        return {k: pruning[f"s_{k}"] for k in ("head_share", "mlps_per_step", "refine")}

    # -- the re-fine-tuned subnetworks --

    def subnetwork_reference_retrained(self) -> bool:
        """Whether the full model is re-fine-tuned as the reference (the subnetworks' recipe departs from
        fine-tuning's, or the config gives fine-tuned classifiers, trained elsewhere with a recipe of their own),
        rather than taken from the fine-tuning run itself."""
        pruning = self.settings()
        return (pruning["subnetwork_max_train_examples"] is not None or pruning["subnetwork_epochs"] is not None
                or bool(self.experiment.given_runs()))

    def subnetwork_names(self) -> list[str]:
        """``full`` (when re-fine-tuned) and ``<method>-<kind>-<protocol>``: a ticket's subnetworks per protocol."""
        pruning = self.settings()
        methods = pruning["subnetwork_methods"] or pruning["methods"]
        names = [f"{m}-{kind}-{p}" for m in methods for p in self.lottery_protocols() for kind in pruning["subnetworks"]]
        return (["full"] if names and self.subnetwork_reference_retrained() else []) + names

    def subnetwork_recipe(self, task: str) -> dict[str, Any]:
        """Re-fine-tuning hyper-parameters of the subnetworks: fine-tuning's, with pruning's overrides."""
        values = self.experiment.hyperparameters(task, states.FINETUNED)
        if self.settings()["subnetwork_epochs"] is not None:
            values["epochs"] = self.settings()["subnetwork_epochs"]
        return values

    def subnetwork_inputs(self, model: str, task: str, seed: int | str, network: str) -> dict[str, str]:
        """What re-fine-tuning one subnetwork reads: the pre-trained folder and the data, the ticket's mask (but for
        ``full``), and for the bad magnitude subnetwork the fine-tuned model whose smallest weights it keeps."""
        experiment = self.experiment
        inputs = {
            "resolved": f"results/models/{model}/resolved.json",
            "train": f"results/data/{task}/train.parquet",
            "dev": f"results/data/{task}/dev.parquet",
            "tokens": experiment.tokens(model, task, self.subnetwork_recipe(task)["max_length"]),
        }
        if network != "full":
            method, kind, protocol = network.split("-")
            inputs["mask"] = f"{self.folder(model, task, seed)}/{method}_{protocol}_mask.safetensors"
            if (method, kind) == ("m", "bad"):
                inputs["finetuned_model"] = f"{experiment.run_dir(model, task, states.FINETUNED, seed)}/model"
        return inputs

    # -- the config's choices --

    def problems(self) -> list[str]:
        pruning = self.settings()
        problems = self.experiment.named_task_problems({"pruning.tasks": pruning["tasks"]})
        for task, settings in pruning["per_task"].items():
            if task not in self.experiment.tasks:  # ignored (configuration.per_task_ignored) or refused before
                continue
            wanted = settings.get("subnetwork_seeds") or []
            if wanted and task not in self.tasks():
                problems.append(f"pruning.per_task.{task}.subnetwork_seeds: {task} is not pruned (pruning.tasks, tasks). "
                                "Fix: prune the task or drop its subnetwork_seeds.")
            elif set(wanted) - set(self.seeds(task)):
                problems.append(f"pruning.per_task.{task}.subnetwork_seeds {sorted(wanted)} names seeds that are not pruned "
                                f"({self.seeds(task)}). Fix: add them to pruning.per_task.{task}.seeds or drop them.")
        unpruned = sorted(set(pruning["subnetwork_methods"] or []) - set(pruning["methods"]))
        if unpruned:
            problems.append(f"pruning.subnetwork_methods names {unpruned}, not in pruning.methods {pruning['methods']}. "
                            "Fix: add them to pruning.methods or drop them.")
        if pruning["importance_split"] == "dev" and "s" in pruning["methods"]:
            # s-pruning's order comes from importance: on all of dev, half B would help choose the held-out ticket
            problems.append("pruning.importance_split: dev lets the dev half that reports s-pruning's ticket choose which heads "
                            "it prunes. Fix: importance_split: train (the default), or drop s from pruning.methods.")
        return problems

    # -- the summary --

    def summary_inputs(self, jobs: Verdicted, model: str) -> dict[str, Any]:
        runs, experiment = jobs.of(model), self.experiment
        methods, protocols = self.settings()["methods"], self.lottery_protocols()
        folders = [(self.folder(model, t, s), t, s) for t, s in runs.pruned]
        return {
            "fitness": f"{FITNESS_TABLE}.parquet",
            "importance": [f"{folder}/importance.parquet" for folder, _, _ in folders],
            "michel": [f"{folder}/michel_curve.parquet" for folder, _, _ in folders],
            "curves": [f"{folder}/{m}_{p}_curve.parquet" for folder, _, _ in folders for m in methods for p in protocols],
            "tickets": [f"{folder}/{m}_{p}_ticket.json" for folder, _, _ in folders for m in methods for p in protocols],
            # survival and stability: the held-out tickets
            "masks": [f"{folder}/{m}_held_out_mask.safetensors" for folder, _, _ in folders for m in methods],
            "compact": [f"{folder}/s_compact.json" for folder, _, _ in folders if "s" in methods],
            "subnetworks": [f"{self.folder(model, t, s)}/subnetworks/{n}.json" for t, s, n in runs.subnetworks],
            "subnetwork_predictions": [f"{self.folder(model, t, s)}/subnetworks/{n}.predictions.parquet"
                                       for t, s, n in runs.subnetworks],
            # the fine-tuned models' own dev predictions: the full reference when it is not re-fine-tuned
            "finetuned_predictions": [f"{experiment.run_dir(model, t, states.FINETUNED, s)}/predictions.parquet" for _, t, s in folders],
            "dev": sorted({f"results/data/{t}/dev.parquet" for _, t, _ in folders}),
        }

    def recipe_note(self, jobs: Verdicted, model: str) -> str:
        """What the subnetworks' table says about how they were re-fine-tuned."""
        pruning = self.settings()
        if not jobs.of(model).subnetworks:
            return "none re-fine-tuned (pruning.subnetworks or every subnetwork_seeds is empty): the table holds the fine-tuned models only"
        if self.subnetwork_reference_retrained():
            given = " (fine-tuned classifiers are given in the config, trained elsewhere)" if self.experiment.given_runs() else ""
            return (f"re-fine-tuned on {pruning['subnetwork_max_train_examples'] or 'all'} train examples, "
                    f"{pruning['subnetwork_epochs'] or 'the fine-tuning'} epochs; full = the same recipe, re-fine-tuned "
                    f"here{given}")
        return "re-fine-tuned with the fine-tuning recipe; full = the fine-tuned model"
