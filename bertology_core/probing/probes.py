"""Layer-wise linear probes on word representations, with control tasks.

Words are UD syntactic words (:mod:`bertology_core.data.treebank`); each is aligned to its word pieces by the
fast tokenizer (``is_split_into_words``, every word given the pieces it has in the running text of the
sentence: :func:`align_words`), and its representation at every layer (embeddings = layer 0) is its first
piece's vector or the mean of its pieces' (``pooling``; the first piece that holds a character of the word:
:func:`pooling_matrix`).

Probes follow the layer-wise setup of Liu et al. 2019 and Tenney et al. 2019 (a linear classifier on frozen
features of one layer) and are trained for every layer at once, as one batched softmax regression. The
control task is Hewitt and Liang's 2019: every word *type* gets a label drawn once from the empirical
distribution of the task's training labels, the same label wherever the type occurs (train or dev); a
probe's *selectivity* is its task accuracy minus its control accuracy. A linear probe is the most selective
kind they found; selectivity says how much of the accuracy the probe could get by memorising word types.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from bertology_core.data import mapped, treebank
from bertology_core.data.word_pieces import as_in_running_text, blank_pieces
from bertology_core.inputs.batching import Encoded
from bertology_core.models.checkpoint import ArrayCheckpoint, Replay

POOLINGS = ("first", "mean")


@dataclass(frozen=True)
class AlignedSentences:
    """Word-piece encodings of word-split sentences. ``piece_words[s][t]`` is the index of the word the
    piece ``t`` of sentence ``s`` belongs to (-1 for special tokens); ``complete[s]`` marks the words that
    have a representation: at least one piece, and all of them inside ``max_length`` (truncation may cut
    the last words; a tokenizer may turn a word such as a lone control character into no piece at all);
    ``blank[s][t]`` marks the pieces that decode to whitespace only: a bare word-start marker (SentencePiece's
    ``▁``, byte-level BPE's ``Ġ``) that the tokenizer split off a word whose first character it cannot join
    to it. Such a piece belongs to its word (``piece_words``) but holds none of its characters."""

    input_ids: list[list[int]]
    piece_words: list[list[int]]
    complete: list[np.ndarray]
    blank: list[list[bool]]

    @property
    def num_words(self) -> list[int]:
        return [len(c) for c in self.complete]


def align_words(tokenizer: PreTrainedTokenizerBase, sentences: Sequence[Sequence[str]], max_length: int) -> AlignedSentences:
    """Tokenise pre-split words with a fast tokenizer (``word_ids`` maps pieces back to words), each word into
    the pieces it has in the sentence's running text (:func:`bertology_core.data.word_pieces.as_in_running_text`),
    truncated to ``max_length``; ``blank`` by :func:`bertology_core.data.word_pieces.blank_pieces`."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("word alignment needs a fast tokenizer (tokenizer.json); this model ships a slow one only")
    input_ids, piece_words, complete, blank = [], [], [], []
    cache: dict[int, bool] = {}
    for words in sentences:
        spaced = as_in_running_text(words)
        full = tokenizer(spaced, is_split_into_words=True, truncation=False).word_ids()
        encoding = tokenizer(spaced, is_split_into_words=True, truncation=True, max_length=max_length)
        kept = [-1 if w is None else w for w in encoding.word_ids()]
        pieces_full = np.bincount([w for w in full if w is not None], minlength=len(words))
        pieces_kept = np.bincount([w for w in kept if w >= 0], minlength=len(words))
        input_ids.append(encoding["input_ids"])
        piece_words.append(kept)
        complete.append((pieces_kept > 0) & (pieces_kept == pieces_full))
        blank.append([w >= 0 and b for w, b in zip(kept, blank_pieces(tokenizer, encoding["input_ids"], cache))])
    return AlignedSentences(input_ids, piece_words, complete, blank)


def pooling_matrix(piece_words: Sequence[int], num_words: int, pooling: str, length: int,
                   blank: Sequence[bool] | None = None) -> np.ndarray:
    """``[num_words, length]`` weights turning piece vectors into word vectors: ``first``, a one-hot row on the
    word's first piece that holds one of its characters (not ``blank``: a bare word-start marker such as ``▁``
    is a piece many words share, not the word's first piece; a word of blank pieces only falls back to its
    first piece); ``mean``, a uniform row over all its pieces, word-start markers included. A word without
    pieces gets a zero row."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
    matrix = np.zeros((num_words, length), dtype=np.float32)
    held: dict[int, list[int]] = {}
    for position, word in enumerate(piece_words):
        if word >= 0:
            held.setdefault(word, []).append(position)
    for word, positions in held.items():
        if pooling == "mean":
            matrix[word, positions] = 1.0
        else:
            filled = [p for p in positions if blank is None or not blank[p]]
            matrix[word, (filled or positions)[0]] = 1.0
    if pooling == "mean":
        counts = matrix.sum(axis=1, keepdims=True)
        matrix = np.divide(matrix, counts, out=np.zeros_like(matrix), where=counts > 0)
    return matrix


@torch.no_grad()
def word_representations(
    model: PreTrainedModel, aligned: AlignedSentences, pooling: str, batch_size: int = 32, dtype: Any = np.float32,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every layer's word vectors, ``[layers + 1, words, hidden]`` (layer 0: the embeddings), for the words of all
    sentences in order, pooled in float32 and stored as ``dtype`` (float16 halves what a job holds; the cast rounds
    to nearest, as a cast of the float32 result would), and the ``[words]`` mask of words that have a
    representation. The result is allocated once (or is ``out``, e.g. a memory map of the output file, of that shape and
    dtype) and filled a sentence at a time: the job holds it and one batch."""
    model.eval()
    device = next(model.parameters()).device
    sentences = Encoded(aligned.input_ids, None, model.config.pad_token_id or 0)
    offsets = np.concatenate([[0], np.cumsum(aligned.num_words)]).astype(np.int64)
    shape = (model.config.num_hidden_layers + 1, int(offsets[-1]), model.config.hidden_size)
    if out is None:
        out = np.empty(shape, dtype=dtype)
    elif out.shape != shape or out.dtype != np.dtype(dtype):
        raise ValueError(f"out is a {out.dtype} {out.shape}, the representations a {np.dtype(dtype)} {shape}")
    for start in range(0, len(sentences), batch_size):
        rows = range(start, min(start + batch_size, len(sentences)))
        batch = {k: v.to(device) for k, v in sentences.collate(rows).items()}
        length = batch["input_ids"].shape[1]
        states = torch.stack(model(**batch, output_hidden_states=True).hidden_states).float().cpu()  # [layers + 1, batch, length, hidden]
        for i, r in enumerate(rows):
            pool = torch.from_numpy(pooling_matrix(aligned.piece_words[r], aligned.num_words[r], pooling, length, aligned.blank[r]))
            out[:, offsets[r] : offsets[r + 1]] = torch.einsum("wt,lth->lwh", pool, states[:, i]).numpy()
        mapped.touched(out, (offsets[rows[-1] + 1] - offsets[rows[0]]) * out.shape[0] * out.shape[2] * out.itemsize)
    masks = aligned.complete
    return out, (np.concatenate(masks) if masks else np.zeros(0, bool))


def control_labels(types: Sequence[str], train_labels: np.ndarray, num_classes: int, seed: int) -> dict[str, int]:
    """Hewitt and Liang's control task: one label per word type, drawn from the empirical distribution of
    ``train_labels`` (class ids), fixed by ``seed`` (types drawn in sorted order, so the draw does not
    depend on the order they are met in).

    Word types unseen in training are handled as their code does (``CorruptedPartOfSpeechLabelTask.prepare``
    registers every type of the train, dev and test observations before training): pass the types of every
    split, so a dev type the probe never saw still has a fixed label, which the probe can only guess, as the
    task probe guesses the tag of an unseen word. Differs from their code: for an uncased model the types are
    lower-cased (:func:`word_types`), and their labels follow the task's train distribution of this run."""
    counts = np.bincount(train_labels, minlength=num_classes).astype(float)
    rng = np.random.default_rng(seed)
    unique = sorted(set(types))
    draws = rng.choice(num_classes, size=len(unique), p=counts / counts.sum())
    return dict(zip(unique, (int(d) for d in draws)))


@dataclass(frozen=True)
class ProbeSettings:
    """Softmax regression per layer: AdamW on standardised features in minibatches, decoupled L2 penalty
    ``weight_decay``, seeded init and order, early stopping on held-out training sentences.

    No defaults here: they live in the config schema (``probing.probe``), the one source."""

    max_epochs: int
    patience: int  # stop when no layer's held-out loss improved for this many epochs
    validation_share: float  # share of the training sentences held out to stop on (never dev)
    batch_size: int
    learning_rate: float
    weight_decay: float
    seed: int


@dataclass
class LayerProbes:
    """Probes of :func:`fit_layer_probes`: weights ``[layers, features, classes]``, biases ``[layers, classes]``,
    the per-layer standardisation, and for each layer the epoch whose weights were kept (best held-out loss),
    the epochs run and the held-out loss."""

    weight: torch.Tensor
    bias: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    best_epoch: np.ndarray
    epochs_run: int
    held_out_loss: np.ndarray


@dataclass(frozen=True)
class WordFeatures:
    """Words' features ``[layers, words, features]`` as a view of a split's stored features (``stored``: ``[layers,
    all words, hidden]``, float16 as probe_features writes them): the words ``index`` of it, each followed, for a
    pair label set, by its syntactic head's vector (``heads``: the head's position among the stored words, -1 for the
    root, whose head vector is zeros). Nothing is copied until a layer or a batch of words is asked for, in float32:
    a job holds a split's features once, as stored, whatever its label sets (the float32 copies of every word, and the
    doubled copy for pairs, took 25-80 GB at BERT-base on the full treebank). ``stored`` may be a memory map of the
    file (:func:`load_probe_inputs`): the pages a gather touched are released as it goes (:func:`mapped.touched`)."""

    stored: np.ndarray
    index: np.ndarray
    heads: np.ndarray | None = None

    @classmethod
    def of(cls, features: "np.ndarray | WordFeatures") -> "WordFeatures":
        """``features`` itself, or a view of every word of an array."""
        return features if isinstance(features, WordFeatures) else cls(np.asarray(features), np.arange(np.shape(features)[1]))

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.stored.shape[0], len(self.index), self.stored.shape[2] * (1 if self.heads is None else 2)

    def subset(self, rows: np.ndarray) -> "WordFeatures":
        """The view of the words ``rows`` (a mask or positions) of this one."""
        return WordFeatures(self.stored, self.index[rows], None if self.heads is None else self.heads[rows])

    def rows(self, rows: np.ndarray | slice = slice(None), layers: int | slice = slice(None)) -> np.ndarray:
        """float32 features of the words ``rows`` of this view, ``[layers, rows, features]`` (``layers`` an int:
        ``[rows, features]``)."""
        own = self.stored[layers][..., self.index[rows], :]
        if self.heads is not None:
            heads = self.heads[rows]
            found = self.stored[layers][..., np.maximum(heads, 0), :]
            own = np.concatenate([own, np.where((heads >= 0)[:, None], found, 0.0).astype(found.dtype)], axis=-1)
        mapped.touched(self.stored, own.nbytes)
        return np.ascontiguousarray(own, dtype=np.float32)

    def standardised(self, mean: torch.Tensor, std: torch.Tensor, size: int) -> Iterator[tuple[slice, torch.Tensor]]:
        """This view's words ``size`` at a time: each chunk's positions and its float32 features standardised with
        ``mean`` and ``std`` (``[layers, chunk, features]``), so that no more than a chunk is held at once."""
        for start in range(0, self.shape[1], size):
            chunk = slice(start, start + size)
            yield chunk, (torch.from_numpy(self.rows(chunk)) - mean) / std

    def statistics(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each layer's mean and standard deviation over these words, ``[layers, 1, features]``, a layer at a time
        (torch's reduction gives the same bits as over the whole ``[layers, words, features]`` tensor)."""
        means, stds = [], []
        for layer in range(self.shape[0]):
            x = torch.from_numpy(self.rows(layers=layer))
            means.append(x.mean(dim=0, keepdim=True))
            stds.append(x.std(dim=0, keepdim=True))
        return torch.stack(means), torch.stack(stds)


def held_out_sentences(sentences: np.ndarray, share: float, seed: int) -> np.ndarray:
    """Mask of the words whose sentence is in a seeded ``share`` of the distinct ``sentences`` (at least one
    sentence, and never all of them): words of one sentence stay on one side."""
    unique = np.unique(sentences)
    if len(unique) < 2:
        raise ValueError(f"early stopping needs at least 2 training sentences, got {len(unique)}")
    count = min(len(unique) - 1, max(1, round(share * len(unique))))
    chosen = np.random.default_rng(seed).choice(unique, size=count, replace=False)
    return np.isin(sentences, chosen)


def _layer_losses(features: WordFeatures, mean: torch.Tensor, std: torch.Tensor, y: torch.Tensor, weight: torch.Tensor,
                  bias: torch.Tensor) -> torch.Tensor:
    """Each layer's mean cross-entropy on the words of ``features`` standardised with ``mean`` and ``std``: every word's
    loss computed a chunk of words at a time, their mean over all words at once."""
    losses = []
    for chunk, x in features.standardised(mean, std, WORDS_PER_CHUNK):
        logits = torch.einsum("lwf,lfc->lwc", x, weight) + bias[:, None]
        target = y[chunk].expand(len(x), -1)
        losses.append(torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none"))
    return torch.cat(losses, dim=1).mean(dim=1) if losses else torch.full((features.shape[0],), float("nan"))


def fit_layer_probes(
    train: np.ndarray | WordFeatures, train_labels: np.ndarray, num_classes: int, settings: ProbeSettings, sentences: np.ndarray
) -> LayerProbes:
    """One linear probe per layer of ``train`` ``[layers, words, features]`` (an array or a :class:`WordFeatures`
    view, whose minibatches are gathered and standardised as they are drawn), all trained together (the
    layers do not interact: the loss is a sum of per-layer losses).

    Stopping is chosen, not an accident of an epoch count: the words of ``settings.validation_share`` of the
    training ``sentences`` (sentence id per word) are held out; after every epoch each layer keeps its
    weights if its held-out cross-entropy is the best so far, and training stops when no layer improved for
    ``patience`` epochs or at ``max_epochs``. The same rule serves task and control probes. The
    standardisation is computed on the words the probe trains on."""
    generator = torch.Generator().manual_seed(settings.seed)
    held = held_out_sentences(np.asarray(sentences), settings.validation_share, settings.seed)
    features_of = WordFeatures.of(train)
    fitted = features_of.subset(~held)
    y_all = torch.from_numpy(np.asarray(train_labels, dtype=np.int64))
    y = y_all[torch.from_numpy(~held)]
    mean, std = fitted.statistics()
    std = std.clamp_min(1e-6)
    x_held, y_held = features_of.subset(held), y_all[torch.from_numpy(held)]  # gathered a chunk at a time, each epoch
    layers, words, features = fitted.shape
    weight = torch.zeros(layers, features, num_classes, requires_grad=True)
    bias = torch.zeros(layers, num_classes, requires_grad=True)
    optimizer = torch.optim.AdamW([weight, bias], lr=settings.learning_rate, weight_decay=settings.weight_decay)
    best_weight, best_bias = weight.detach().clone(), bias.detach().clone()
    with torch.no_grad():
        best_loss = _layer_losses(x_held, mean, std, y_held, best_weight, best_bias)
    best_epoch = np.zeros(layers, dtype=np.int64)
    epoch = 0
    for epoch in range(1, settings.max_epochs + 1):
        order = torch.randperm(words, generator=generator)
        for start in range(0, words, settings.batch_size):
            rows = order[start : start + settings.batch_size]
            x = (torch.from_numpy(fitted.rows(rows.numpy())) - mean) / std
            logits = torch.einsum("lbf,lfc->lbc", x, weight) + bias[:, None]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, num_classes), y[rows].repeat(layers)) * layers
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            losses = _layer_losses(x_held, mean, std, y_held, weight, bias)
            better = losses < best_loss
            best_loss = torch.where(better, losses, best_loss)
            best_weight[better], best_bias[better] = weight[better], bias[better]
        best_epoch[better.numpy()] = epoch
        if epoch - best_epoch.max() >= settings.patience:
            break
    return LayerProbes(best_weight, best_bias, mean, std, best_epoch, epoch, best_loss.numpy())


REFERENCE_MAX_ITERATIONS = 5000  # lbfgs iterations before the reference counts as not converged


def reference_accuracy(train: np.ndarray | WordFeatures, train_labels: np.ndarray, dev: np.ndarray | WordFeatures,
                       dev_labels: np.ndarray, regularisation: float) -> np.ndarray:
    """Dev accuracy per layer of scikit-learn's ``LogisticRegression`` (lbfgs run to convergence, ``C =
    regularisation``, features standardised on train): a converged reference for :func:`fit_layer_probes`,
    so a reader sees how much the probe's own stopping and regularisation move its accuracy. Give it the
    words the probe trained on (not its held-out sentences), so that only the fitting differs. Raises if
    lbfgs stops at its iteration cap: an unconverged reference would be no reference."""
    train, dev = WordFeatures.of(train), WordFeatures.of(dev)
    out = np.empty(train.shape[0])
    for layer in range(train.shape[0]):
        model = make_pipeline(StandardScaler(), LogisticRegression(C=regularisation, max_iter=REFERENCE_MAX_ITERATIONS))
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            try:
                model.fit(train.rows(layers=layer).astype(np.float64), train_labels)
            except ConvergenceWarning:
                raise RuntimeError(f"layer {layer}: the reference LogisticRegression did not converge in {REFERENCE_MAX_ITERATIONS} "
                                   "lbfgs iterations. Fix: a smaller probing.reference.regularisation (stronger L2).") from None
        out[layer] = model.score(dev.rows(layers=layer).astype(np.float64), dev_labels)
    return out


WORDS_PER_CHUNK = 4096  # words a chunk when a probe labels dev: [layers, words, features] float32 held a chunk at a time


@torch.no_grad()
def probe_correct(probe, features: np.ndarray | WordFeatures, labels: np.ndarray) -> np.ndarray:
    """Whether a :func:`fit_layer_probes` probe labels each word right, ``[layers, words]``, on ``features``
    ``[layers, words, features]`` (an array or a :class:`WordFeatures` view), gathered ``WORDS_PER_CHUNK`` words at a time."""
    features = WordFeatures.of(features)
    parts = [(torch.einsum("lwf,lfc->lwc", x, probe.weight) + probe.bias[:, None]).argmax(-1).numpy()
             for _, x in features.standardised(probe.mean, probe.std, WORDS_PER_CHUNK)]
    predictions = np.concatenate(parts, axis=1) if parts else np.zeros((features.shape[0], 0), dtype=np.int64)
    return predictions == np.asarray(labels)[None, :]


def probe_accuracy(probe, features: np.ndarray | WordFeatures, labels: np.ndarray) -> np.ndarray:
    """Accuracy per layer of a :func:`fit_layer_probes` probe on ``features`` ``[layers, words, features]``."""
    return probe_correct(probe, features, labels).mean(axis=1)


def word_sentences(frame: pl.DataFrame) -> np.ndarray:
    """The sentence (row number) of every word, in the flat word order of all sentences."""
    lengths = frame["forms"].list.len().to_numpy()
    return np.repeat(np.arange(len(lengths)), lengths)


# --- probing data from a treebank -----------------------------------------------------------------

OTHER = "<other>"


def word_labels(frame: pl.DataFrame, field: str, strip_subtypes: bool = False) -> list[str]:
    """Every word's label from a treebank frame (:func:`bertology_core.data.treebank.read_conllu`), sentences in
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


def head_has_representation(mask: np.ndarray, frame: pl.DataFrame) -> np.ndarray:
    """Words whose head is the root or a word with a representation."""
    index = head_positions(frame)
    return (index < 0) | mask[np.maximum(index, 0)]


def word_types(frame: pl.DataFrame, lowercase: bool) -> list[str]:
    """Word types for the control task: the word form (Hewitt and Liang key on the token string),
    lower-cased for an uncased model, which cannot tell "The" from "the"."""
    forms = [form for sentence in frame["forms"].to_list() for form in sentence]
    return [form.lower() for form in forms] if lowercase else forms


@dataclass(frozen=True)
class LabelSetData:
    """One label set ready for probes: features ``[layers, words, features]`` (:class:`WordFeatures` views) and class
    ids of the words that have a representation and a label (for a ``pair`` label set the word's vector next to its
    syntactic head's, zeros for the root: a relation is a property of the word pair), each word's sentence, and the
    word types (for the control task) of every word of the split."""

    name: str
    vocabulary: list[str]
    features: dict[str, WordFeatures]
    targets: dict[str, np.ndarray]
    sentences: dict[str, np.ndarray]
    usable: dict[str, np.ndarray]
    types: dict[str, np.ndarray]

    def x(self, split: str) -> WordFeatures:
        return self.features[split].subset(self.usable[split])

    def y(self, split: str) -> np.ndarray:
        return self.targets[split][self.usable[split]]

    def words_sentences(self, split: str) -> np.ndarray:
        return self.sentences[split][self.usable[split]]


def label_set_data(frames: dict[str, pl.DataFrame], tensors: dict[str, np.ndarray], name: str, spec: dict,
                   min_label_count: int, lowercase: bool) -> LabelSetData:
    """The words, features and labels of the label set ``spec`` (``field``, ``strip_subtypes``, ``pair``) on word
    features ``tensors`` (``train``/``dev`` ``[layers, words, hidden]`` and ``<split>_complete`` masks) of the
    treebank ``frames`` (``train``/``dev``)."""
    labels = {split: word_labels(frame, spec["field"], spec.get("strip_subtypes", False)) for split, frame in frames.items()}
    vocabulary = label_vocabulary(labels["train"], min_label_count)
    targets = {split: encode_labels(labels[split], vocabulary) for split in frames}
    features, usable = {}, {}
    for split, frame in frames.items():
        complete = tensors[f"{split}_complete"].astype(bool)
        words = np.arange(tensors[split].shape[1])
        if spec.get("pair", False):  # the word and its head: a relation is a property of the pair
            features[split] = WordFeatures(tensors[split], words, head_positions(frame))
            complete = complete & head_has_representation(complete, frame)
        else:
            features[split] = WordFeatures(tensors[split], words)
        usable[split] = complete & (targets[split] >= 0)
    return LabelSetData(name, vocabulary, features, targets, {split: word_sentences(frame) for split, frame in frames.items()},
                        usable, {split: np.array(word_types(frame, lowercase)) for split, frame in frames.items()})


REFERENCE_COLUMNS = {"reference_accuracy": pl.Float64, "reference_control_accuracy": pl.Float64, "reference_selectivity": pl.Float64,
                     "reference_probe_accuracy": pl.Float64, "reference_probe_control_accuracy": pl.Float64,
                     "reference_train_words": pl.Int64}


def sentence_sample(sentences: np.ndarray, count: int | None, seed: int) -> np.ndarray:
    """Mask of the words whose sentence is in a seeded sample of ``count`` of the distinct ``sentences`` (every word
    when ``count`` is None or not below their number). Its stream is not :func:`held_out_sentences`' for the same
    seed (that one's first draws: the sample would be the probe's held-out sentences)."""
    unique = np.unique(sentences)
    if count is None or count >= len(unique):
        return np.ones(len(sentences), dtype=bool)
    return np.isin(sentences, np.random.default_rng([seed, 1]).choice(unique, size=count, replace=False))


def probe_label_sets(
    frames: dict[str, pl.DataFrame], tensors: dict[str, np.ndarray], label_specs: dict[str, dict], settings: ProbeSettings,
    min_label_count: int, control_seed: int, lowercase: bool, reference_regularisation: float | None = None,
    reference_sentences: int | None = None, checkpoint: ArrayCheckpoint | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Task and control probes per layer for every label set of ``label_specs`` (name -> ``field``,
    ``strip_subtypes``, ``pair``) on word features ``tensors`` (``train``/``dev`` ``[layers, words, hidden]``
    and ``<split>_complete`` masks) of the treebank ``frames`` (``train``/``dev``).

    Returns the table (per label set and layer: accuracy, control accuracy, selectivity, the epoch each probe
    kept, the majority baseline; with ``reference_regularisation`` also the converged logistic regression's
    accuracy, control accuracy and selectivity) and every dev word's right/wrong per layer (what resampling
    intervals use).

    The reference is fitted on at most ``reference_sentences`` training sentences (None: all; a seeded sample of
    them, the same for task and control), because lbfgs to convergence on every word costs hours at BERT-base on
    the full treebank (52 fits of up to 183k words x 1,536 features). So that only the fitting differs, it is set
    beside a probe fitted the same way as the reported one on the same sentences (``reference_probe_accuracy``:
    the reported probe itself when nothing was left out), and ``reference_train_words`` says how many words the
    reference fitted.

    With a ``checkpoint``, the label sets' task and control probes fitted so far are saved once its interval has passed
    after a fit (:class:`~bertology_core.models.checkpoint.Replay`): a rerun after a kill reads them back and fits the
    rest."""
    rows, word_rows = [], []
    replay = Replay(checkpoint)
    for name, spec in label_specs.items():
        data = label_set_data(frames, tensors, name, spec, min_label_count, lowercase)
        vocabulary, targets, usable, types = data.vocabulary, data.targets, data.usable, data.types
        train_sentences, dev_sentences_all = data.sentences["train"], data.sentences["dev"]
        control = control_labels(list(types["train"]) + list(types["dev"]), targets["train"][usable["train"]], len(vocabulary), control_seed)
        results: dict[str, dict[str, np.ndarray]] = {}
        for kind in ("task", "control"):
            train_y = targets["train"] if kind == "task" else np.array([control[t] for t in types["train"]])
            dev_y = targets["dev"] if kind == "task" else np.array([control[t] for t in types["dev"]])

            def fit(train_y=train_y, dev_y=dev_y) -> dict[str, Any]:
                x_train, y_train = data.x("train"), train_y[usable["train"]]
                x_dev, y_dev = data.x("dev"), dev_y[usable["dev"]]
                probe = fit_layer_probes(x_train, y_train, len(vocabulary), settings, train_sentences[usable["train"]])
                correct = probe_correct(probe, x_dev, y_dev)
                fitted = {"correct": correct, "epoch": probe.best_epoch, "epochs_run": np.full(len(correct), probe.epochs_run)}
                if reference_regularisation is not None:  # on the words a probe trained on: only the fitting differs
                    words_sentences = train_sentences[usable["train"]]
                    sampled = sentence_sample(words_sentences, reference_sentences, settings.seed)
                    beside = probe if sampled.all() else fit_layer_probes(
                        x_train.subset(sampled), y_train[sampled], len(vocabulary), settings, words_sentences[sampled])
                    kept = np.flatnonzero(sampled)[~held_out_sentences(words_sentences[sampled], settings.validation_share, settings.seed)]
                    fitted["reference"] = reference_accuracy(x_train.subset(kept), y_train[kept], x_dev, y_dev, reference_regularisation)
                    fitted["reference_probe"] = correct.mean(axis=1) if beside is probe else probe_accuracy(beside, x_dev, y_dev)
                    fitted["reference_words"] = len(kept)
                return fitted

            found = replay(fit)
            correct = found["correct"]
            results[kind] = {"accuracy": correct.mean(axis=1), **{key: value for key, value in found.items() if key != "correct"}}
            word_rows.append(pl.DataFrame({
                "labels": name, "kind": kind, "layer": np.repeat(np.arange(correct.shape[0]), correct.shape[1]).astype(np.int16),
                "sentence": np.tile(dev_sentences_all[usable["dev"]], correct.shape[0]).astype(np.int32), "correct": correct.reshape(-1),
            }))
        majority = float(np.mean(targets["dev"][usable["dev"]] == np.bincount(targets["train"][usable["train"]]).argmax()))
        task, ctrl = results["task"], results["control"]
        for layer in range(len(task["accuracy"])):
            reference = dict.fromkeys(REFERENCE_COLUMNS)
            if reference_regularisation is not None:
                reference = {"reference_accuracy": float(task["reference"][layer]), "reference_control_accuracy": float(ctrl["reference"][layer]),
                             "reference_selectivity": float(task["reference"][layer] - ctrl["reference"][layer]),
                             "reference_probe_accuracy": float(task["reference_probe"][layer]),
                             "reference_probe_control_accuracy": float(ctrl["reference_probe"][layer]),
                             "reference_train_words": int(task["reference_words"])}
            rows.append({"labels": name, "layer": layer, "accuracy": float(task["accuracy"][layer]),
                         "control_accuracy": float(ctrl["accuracy"][layer]),
                         "selectivity": float(task["accuracy"][layer] - ctrl["accuracy"][layer]),
                         "epoch": int(task["epoch"][layer]), "control_epoch": int(ctrl["epoch"][layer]),
                         "epochs_run": int(task["epochs_run"][layer]), "control_epochs_run": int(ctrl["epochs_run"][layer]),
                         **reference, "majority_accuracy": majority, "classes": len(vocabulary),
                         "train_words": int(usable["train"].sum()), "dev_words": int(usable["dev"].sum())})
    replay.finish()
    schema = {"layer": pl.Int16, **REFERENCE_COLUMNS}
    return pl.DataFrame(rows, schema_overrides=schema), pl.concat(word_rows)


def load_probe_inputs(features: str, treebank_splits: dict[str, str], sample: dict) -> tuple[dict[str, np.ndarray], dict[str, pl.DataFrame]]:
    """A probed state's word features (the ``probe_features`` Safetensors, memory-mapped: a job reads the layers and
    words it uses, as it uses them) and the seeded treebank samples they were computed on (``sample``: ``train``/``dev``
    sentence counts and ``seed``), checked to hold the same words."""
    tensors, _ = mapped.read_mapped(features)
    frames = {split: treebank.sample(pl.read_parquet(path), sample[split], sample["seed"]) for split, path in treebank_splits.items()}
    for split, frame in frames.items():
        words = int(frame["forms"].list.len().sum())
        if tensors[split].shape[1] != words:
            raise RuntimeError(f"{features}: {tensors[split].shape[1]} {split} words, the treebank sample has {words}: rerun probe_features")
    return tensors, frames
