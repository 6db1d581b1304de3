"""Linear probes per layer for each label set, and their control tasks (rule probe_layers)."""

import logging

from _common import log_to

log_to(snakemake.log[0])

import numpy as np
import polars as pl
import torch
from safetensors.numpy import load_file

from _probing import treebank_sample
from bertology_core import io, models, probing

torch.set_num_threads(snakemake.threads)  # the same thread count every run: identical sums, identical probes
params = snakemake.params
tensors = load_file(snakemake.input.features)
frames = {split: treebank_sample(snakemake.input[split], params.sample[split], params.sample["seed"]) for split in ("train", "dev")}
for split, frame in frames.items():
    words = int(frame["forms"].list.len().sum())
    if tensors[split].shape[1] != words:
        raise RuntimeError(f"{snakemake.input.features}: {tensors[split].shape[1]} {split} words, the treebank sample has {words}: rerun probe_features")
tokenizer = models.load_tokenizer(io.read_json(snakemake.input.resolved)["path"])
lowercase = tokenizer.tokenize("The") == tokenizer.tokenize("the")
settings = probing.ProbeSettings(**params.probe)

rows, word_rows = [], []  # word_rows: every dev word's right/wrong per layer, what the claims table resamples
for name, spec in params.labels.items():
    labels = {split: probing.word_labels(frame, spec["field"], spec.get("strip_subtypes", False)) for split, frame in frames.items()}
    vocabulary = probing.label_vocabulary(labels["train"], params.min_label_count)
    targets = {split: probing.encode_labels(labels[split], vocabulary) for split in frames}
    features, usable = {}, {}
    for split, frame in frames.items():
        complete = tensors[f"{split}_complete"].astype(bool)
        if spec.get("pair", False):  # the word and its head: a relation is a property of the pair
            features[split] = probing.with_head_words(tensors[split], frame)
            complete = complete & probing.head_has_representation(complete, frame)
        else:
            features[split] = tensors[split]
        usable[split] = complete & (targets[split] >= 0)
    types = {split: np.array(probing.word_types(frame, lowercase)) for split, frame in frames.items()}
    control = probing.control_labels(list(types["train"]) + list(types["dev"]), targets["train"][usable["train"]],
                                     len(vocabulary), params.control_seed)
    results = {}
    dev_sentences = probing.word_sentences(frames["dev"])[usable["dev"]]
    for kind in ("task", "control"):
        train_y = targets["train"] if kind == "task" else np.array([control[t] for t in types["train"]])
        dev_y = targets["dev"] if kind == "task" else np.array([control[t] for t in types["dev"]])
        probe = probing.fit_layer_probes(features["train"][:, usable["train"]], train_y[usable["train"]], len(vocabulary), settings)
        correct = probing.probe_correct(probe, features["dev"][:, usable["dev"]], dev_y[usable["dev"]])
        results[kind] = correct.mean(axis=1)
        word_rows.append(pl.DataFrame({
            "labels": name, "kind": kind, "layer": np.repeat(np.arange(correct.shape[0]), correct.shape[1]).astype(np.int16),
            "sentence": np.tile(dev_sentences, correct.shape[0]).astype(np.int32), "correct": correct.reshape(-1),
        }))
    majority = float(np.mean(targets["dev"][usable["dev"]] == np.bincount(targets["train"][usable["train"]]).argmax()))
    for layer in range(len(results["task"])):
        rows.append({"labels": name, "layer": layer, "accuracy": float(results["task"][layer]),
                     "control_accuracy": float(results["control"][layer]),
                     "selectivity": float(results["task"][layer] - results["control"][layer]),
                     "majority_accuracy": majority, "classes": len(vocabulary),
                     "train_words": int(usable["train"].sum()), "dev_words": int(usable["dev"].sum())})
    logging.info("%s: %d classes; accuracy per layer %s; control %s", name, len(vocabulary),
                 np.round(results["task"], 3).tolist(), np.round(results["control"], 3).tolist())
table = pl.DataFrame(rows, schema_overrides={"layer": pl.Int16}).with_columns(pl.lit(snakemake.wildcards.probed).alias("state"))
io.write_parquet(table, snakemake.output.probes)
io.write_parquet(pl.concat(word_rows).with_columns(pl.lit(snakemake.wildcards.probed).alias("state")), snakemake.output.words)
