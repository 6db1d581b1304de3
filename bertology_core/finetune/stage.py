"""The finetune stage's declaration: how its jobs run (resources that rerun nothing) and what the pre-trained
encoder's evaluation depends on. Fine-tuning's recipe itself (hyper-parameters, max_length) is read by every model job:
:class:`bertology_core.jobs.experiment.Experiment`."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bertology_core.data import states
from bertology_core.jobs.experiment import Stage


class Finetune(Stage):
    def evaluation_parameters(self, task: str, state: str = states.PRETRAINED) -> dict[str, Any]:
        """An evaluation of a model nobody trains here (the pre-trained encoder; a given fine-tuned classifier, state
        finetuned): no training settings, so changing them never reruns it."""
        return {"max_length": self.experiment.max_length(task, state)}

    def runtime(self) -> dict[str, int]:
        """How a fine-tuning job runs, not what it computes: resources, so a change reruns nothing (a checkpoint
        interval of 0 means none: by steps only, or by time only). Also how gates and subnetworks train."""
        finetune = self.config["finetune"]
        return {
            "eval_batch_size": finetune["eval_batch_size"],
            "checkpoint_steps": finetune["checkpoint_steps"] or 0,
            "checkpoint_seconds": round(60 * finetune["checkpoint_minutes"]) if finetune["checkpoint_minutes"] else 0,
        }

    def training_runtime(self, epochs: Callable[[Any], float],
                         max_examples: Callable[[Any], int | None] = lambda wc: None) -> Callable[..., int]:
        """The ``runtime`` resource (minutes) of a training job: ``compute.training_request_minutes_per_10k_examples`` per
        epoch (``epochs(wildcards)``) over the task's training examples (the prepared split's row count, from its
        Parquet footer, at most ``max_examples(wildcards)``), at least ``compute.training_request_min_minutes``, times the
        attempt (a retried job asks for more). Snakemake evaluates it again once the job's input exists, before it
        schedules the job; until then (a dry run before the data is prepared) the task's local training file gives the
        examples (:meth:`Experiment.source_rows`), and a Hub dataset the least."""
        compute = self.config["compute"]
        rate, least = compute["training_request_minutes_per_10k_examples"], compute["training_request_min_minutes"]

        def runtime(wildcards: Any, input: Any, attempt: int) -> int:  # noqa: A002 - Snakemake's argument name
            train = getattr(input, "train", None)
            if train is None:
                raise ValueError("training_runtime: the rule's input names no `train` split. Fix: name the training "
                                 "split's input `train`.")
            if Path(train).exists():
                examples = pq.ParquetFile(train).metadata.num_rows
            else:  # before the split is prepared: its local file's examples, or the least (a Hub dataset)
                examples = self.experiment.source_rows(wildcards.task, "train")
                if examples is None:
                    return attempt * least
                prepared = self.experiment.max_examples(wildcards.task, "train")  # prepare_data's cut
                examples = examples if prepared is None else min(examples, prepared)
            cap = max_examples(wildcards)
            if cap is not None:
                examples = min(examples, cap)
            return attempt * max(least, math.ceil(rate * epochs(wildcards) * examples / 10_000))

        return runtime
