"""Layer-wise linear probes on word representations, with control tasks.

Words are UD syntactic words (:mod:`bertology_core.treebank`); each is aligned to its word pieces by the
fast tokenizer (``is_split_into_words``), and its representation at every layer (embeddings = layer 0) is
its first piece's vector or the mean of its pieces' (``pooling``).

Probes follow the layer-wise setup of Liu et al. 2019 and Tenney et al. 2019 (a linear classifier on frozen
features of one layer) and are trained for every layer at once, as one batched softmax regression. The
control task is Hewitt and Liang's 2019: every word *type* gets a label drawn once from the empirical
distribution of the task's training labels, the same label wherever the type occurs (train or dev); a
probe's *selectivity* is its task accuracy minus its control accuracy. A linear probe is the most selective
kind they found; selectivity says how much of the accuracy the probe could get by memorising word types.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import torch
from transformers import PreTrainedModel

from bertology_core.batching import Encoded

POOLINGS = ("first", "mean")


@dataclass(frozen=True)
class AlignedSentences:
    """Word-piece encodings of word-split sentences. ``piece_words[s][t]`` is the index of the word the
    piece ``t`` of sentence ``s`` belongs to (-1 for special tokens); ``complete[s]`` marks the words that
    have a representation: at least one piece, and all of them inside ``max_length`` (truncation may cut
    the last words; a tokenizer may turn a word such as a lone control character into no piece at all)."""

    input_ids: list[list[int]]
    piece_words: list[list[int]]
    complete: list[np.ndarray]

    @property
    def num_words(self) -> list[int]:
        return [len(c) for c in self.complete]


def align_words(tokenizer, sentences: Sequence[Sequence[str]], max_length: int) -> AlignedSentences:
    """Tokenise pre-split words (a fast tokenizer: ``word_ids`` maps pieces back to words)."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("word alignment needs a fast tokenizer (tokenizer.json); this model ships a slow one only")
    input_ids, piece_words, complete = [], [], []
    for words in sentences:
        full = tokenizer(list(words), is_split_into_words=True, truncation=False).word_ids()
        encoding = tokenizer(list(words), is_split_into_words=True, truncation=True, max_length=max_length)
        kept = [-1 if w is None else w for w in encoding.word_ids()]
        pieces_full = np.bincount([w for w in full if w is not None], minlength=len(words))
        pieces_kept = np.bincount([w for w in kept if w >= 0], minlength=len(words))
        input_ids.append(encoding["input_ids"])
        piece_words.append(kept)
        complete.append((pieces_kept > 0) & (pieces_kept == pieces_full))
    return AlignedSentences(input_ids, piece_words, complete)


def pooling_matrix(piece_words: Sequence[int], num_words: int, pooling: str, length: int) -> np.ndarray:
    """``[num_words, length]`` weights turning piece vectors into word vectors: a one-hot row on the
    word's first piece, or a uniform row over its pieces; a word without pieces gets a zero row."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
    matrix = np.zeros((num_words, length), dtype=np.float32)
    for position, word in enumerate(piece_words):
        if word < 0:
            continue
        if pooling == "mean":
            matrix[word, position] = 1.0
        elif not matrix[word].any():
            matrix[word, position] = 1.0
    if pooling == "mean":
        counts = matrix.sum(axis=1, keepdims=True)
        matrix = np.divide(matrix, counts, out=np.zeros_like(matrix), where=counts > 0)
    return matrix


@torch.no_grad()
def word_representations(
    model: PreTrainedModel, aligned: AlignedSentences, pooling: str, batch_size: int = 32
) -> tuple[np.ndarray, np.ndarray]:
    """Every layer's word vectors, ``[layers + 1, words, hidden]`` float32 (layer 0: the embeddings), for
    the words of all sentences in order, and the ``[words]`` mask of words that have a representation."""
    model.eval()
    device = next(model.parameters()).device
    sentences = Encoded(aligned.input_ids, None, model.config.pad_token_id or 0)
    chunks, masks = [], []
    for start in range(0, len(sentences), batch_size):
        rows = range(start, min(start + batch_size, len(sentences)))
        batch = {k: v.to(device) for k, v in sentences.collate(rows).items()}
        length = batch["input_ids"].shape[1]
        states = torch.stack(model(**batch, output_hidden_states=True).hidden_states).float().cpu()  # [layers + 1, batch, length, hidden]
        for i, r in enumerate(rows):
            pool = torch.from_numpy(pooling_matrix(aligned.piece_words[r], aligned.num_words[r], pooling, length))
            chunks.append(torch.einsum("wt,lth->lwh", pool, states[:, i]).numpy())
            masks.append(aligned.complete[r])
    hidden = model.config.hidden_size
    if not chunks:
        return np.zeros((model.config.num_hidden_layers + 1, 0, hidden), np.float32), np.zeros(0, bool)
    return np.concatenate(chunks, axis=1), np.concatenate(masks)


def control_labels(types: Sequence[str], train_labels: np.ndarray, num_classes: int, seed: int) -> dict[str, int]:
    """Hewitt and Liang's control task: one label per word type, drawn from the empirical distribution of
    ``train_labels`` (class ids), fixed by ``seed`` (types drawn in sorted order, so the draw does not
    depend on the order they are met in)."""
    counts = np.bincount(train_labels, minlength=num_classes).astype(float)
    rng = np.random.default_rng(seed)
    unique = sorted(set(types))
    draws = rng.choice(num_classes, size=len(unique), p=counts / counts.sum())
    return dict(zip(unique, (int(d) for d in draws)))


@dataclass(frozen=True)
class ProbeSettings:
    """Softmax regression per layer: Adam on standardised features, ``epochs`` passes in minibatches, L2
    penalty ``weight_decay`` (decoupled), seeded init and order."""

    epochs: int = 20
    batch_size: int = 512
    learning_rate: float = 1e-2
    weight_decay: float = 1e-4
    seed: int = 0


def fit_layer_probes(
    train: np.ndarray, train_labels: np.ndarray, num_classes: int, settings: ProbeSettings = ProbeSettings()
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One linear probe per layer of ``train`` ``[layers, words, features]``, all trained together (the
    layers do not interact: the loss is a sum of per-layer losses). Returns weights ``[layers, features,
    classes]``, biases ``[layers, classes]`` and the (mean, std) standardisation of each layer."""
    generator = torch.Generator().manual_seed(settings.seed)
    x = torch.from_numpy(np.ascontiguousarray(train, dtype=np.float32))
    y = torch.from_numpy(np.asarray(train_labels, dtype=np.int64))
    mean, std = x.mean(dim=1, keepdim=True), x.std(dim=1, keepdim=True).clamp_min(1e-6)
    x = (x - mean) / std
    layers, words, features = x.shape
    weight = torch.zeros(layers, features, num_classes, requires_grad=True)
    bias = torch.zeros(layers, num_classes, requires_grad=True)
    optimizer = torch.optim.AdamW([weight, bias], lr=settings.learning_rate, weight_decay=settings.weight_decay)
    for _ in range(settings.epochs):
        order = torch.randperm(words, generator=generator)
        for start in range(0, words, settings.batch_size):
            rows = order[start : start + settings.batch_size]
            logits = torch.einsum("lbf,lfc->lbc", x[:, rows], weight) + bias[:, None]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, num_classes), y[rows].repeat(layers)) * layers
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return weight.detach(), bias.detach(), (mean, std)


@torch.no_grad()
def probe_correct(probe, features: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Whether a :func:`fit_layer_probes` probe labels each word right, ``[layers, words]``, on ``features``
    ``[layers, words, features]``."""
    weight, bias, (mean, std) = probe
    x = (torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32)) - mean) / std
    predictions = (torch.einsum("lwf,lfc->lwc", x, weight) + bias[:, None]).argmax(-1).numpy()
    return predictions == np.asarray(labels)[None, :]


def probe_accuracy(probe, features: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Accuracy per layer of a :func:`fit_layer_probes` probe on ``features`` ``[layers, words, features]``."""
    return probe_correct(probe, features, labels).mean(axis=1)


def word_sentences(frame: pl.DataFrame) -> np.ndarray:
    """The sentence (row number) of every word, in the flat word order of all sentences."""
    lengths = frame["forms"].list.len().to_numpy()
    return np.repeat(np.arange(len(lengths)), lengths)


# --- probing data from a treebank -----------------------------------------------------------------

OTHER = "<other>"


def word_labels(frame: pl.DataFrame, field: str, strip_subtypes: bool = False) -> list[str]:
    """Every word's label from a treebank frame (:func:`bertology_core.treebank.read_conllu`), sentences in
    order: ``upos``, ``xpos`` or ``deprels`` (``strip_subtypes``: ``nmod:poss`` -> ``nmod``)."""
    labels = [label for sentence in frame[field].to_list() for label in sentence]
    return [label.split(":")[0] for label in labels] if strip_subtypes else labels


def label_vocabulary(train_labels: Sequence[str], min_count: int = 1) -> list[str]:
    """The label set: train labels seen at least ``min_count`` times, most frequent first (ties by name);
    the rest share one class, :data:`OTHER`, listed last when it occurs."""
    counts: dict[str, int] = {}
    for label in train_labels:
        counts[label] = counts.get(label, 0) + 1
    kept = sorted((label for label, n in counts.items() if n >= min_count), key=lambda label: (-counts[label], label))
    return kept + ([OTHER] if len(kept) < len(counts) else [])


def encode_labels(labels: Sequence[str], vocabulary: Sequence[str]) -> np.ndarray:
    """Class ids; labels outside the vocabulary (rare in train, or unseen) map to :data:`OTHER`, or to -1
    when the vocabulary has no such class (those words are then left out)."""
    index = {label: i for i, label in enumerate(vocabulary)}
    other = index.get(OTHER, -1)
    return np.array([index.get(label, other) for label in labels], dtype=np.int64)


def head_positions(frame: pl.DataFrame) -> np.ndarray:
    """Each word's head as a position in the flat word order of all sentences (-1 for the root)."""
    heads = frame["heads"].to_list()
    starts = np.cumsum([0] + [len(h) for h in heads[:-1]])
    return np.concatenate([np.where(np.asarray(h) > 0, start + np.asarray(h) - 1, -1) for start, h in zip(starts, heads)])


def with_head_words(features: np.ndarray, frame: pl.DataFrame) -> np.ndarray:
    """``[layers, words, 2 x hidden]``: each word's vector next to its syntactic head's (zeros for the
    root), the input of the dependency-relation probe (a relation is a property of the word pair)."""
    index = head_positions(frame)
    head_vectors = np.where((index >= 0)[None, :, None], features[:, np.maximum(index, 0)], 0.0).astype(features.dtype)
    return np.concatenate([features, head_vectors], axis=-1)


def head_has_representation(mask: np.ndarray, frame: pl.DataFrame) -> np.ndarray:
    """Words whose head is the root or a word with a representation."""
    index = head_positions(frame)
    return (index < 0) | mask[np.maximum(index, 0)]


def word_types(frame: pl.DataFrame, lowercase: bool) -> list[str]:
    """Word types for the control task: the word form (Hewitt and Liang key on the token string),
    lower-cased for an uncased model, which cannot tell "The" from "the"."""
    forms = [form for sentence in frame["forms"].to_list() for form in sentence]
    return [form.lower() for form in forms] if lowercase else forms
