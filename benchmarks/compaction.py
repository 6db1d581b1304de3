"""Compacted (physically pruned) models against the full model: parameters, inference time, exactness.

    python benchmarks/compaction.py [--glue ../shared/data/glue] [--examples 256] [--threads 1] [--out BENCHMARKS.md]

all-MiniLM-L6-v2 as an MRPC classifier (fresh head; the speed does not depend on the weights' values) with
seeded random structure masks keeping 100%, 75%, 50% and 25% of the heads and of the MLPs. For each: the
dev-set forward time of the model as the engine gates it (heads and MLPs multiplied by 0: no faster) and of
the compacted model (``bertology_core.pruning.compaction.compact``: the removed heads' rows and the removed MLPs are
cut out of the weight matrices), best of 3 passes, same batches, and the largest logit difference between
the two (exactness). Writes (replaces) the section "Compacted models" of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Compacted models"


def forward_seconds(model, data, plan, batch_size: int = 32, repeats: int = 3):
    import numpy as np
    import torch

    from bertology_core.engine.intervention import intervene
    from bertology_core.engine.plan import InterventionPlan

    order = np.argsort(-data.lengths(), kind="stable")
    best, logits = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        outs = []
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                batch = data.collate(order[start : start + batch_size])
                with intervene(model, plan or InterventionPlan()):
                    outs.append(model(**batch).logits)
        best = min(best, time.perf_counter() - started)
        logits = torch.cat(outs)
    return best, logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--glue", type=Path, default=REPO.parent / "shared" / "data" / "glue")
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "benchmarks"))
    import numpy as np
    import torch
    from disabling_sweep import minilm_and_data
    from profile_times import machine, write_section

    from bertology_core.engine.attention_function import use_engine
    from bertology_core.pruning import compaction
    from bertology_core.engine.plan import StructureMask

    torch.set_num_threads(args.threads)
    model, data, source = minilm_and_data(args.glue, args.examples)
    use_engine(model)
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    full_seconds, _ = forward_seconds(model, data, None)
    rows = []
    rng = np.random.default_rng(0)
    for keep in (1.0, 0.75, 0.5, 0.25):
        head_mask = np.zeros(layers * heads, dtype=bool)
        head_mask[rng.choice(layers * heads, size=round(keep * layers * heads), replace=False)] = True
        mlp_mask = np.zeros(layers, dtype=bool)
        mlp_mask[rng.choice(layers, size=round(keep * layers), replace=False)] = True
        mask = StructureMask(head_mask.reshape(layers, heads), mlp_mask)
        gated_seconds, gated = forward_seconds(model, data, mask.plan())
        compact = compaction.compact(copy.deepcopy(model), mask)
        compact_seconds, compacted = forward_seconds(compact, data, None)
        rows.append({
            "keep": keep, "heads": mask.heads_kept, "mlps": mask.mlps_kept,
            "parameters": compaction.parameter_count(compact), "gated_s": gated_seconds, "compact_s": compact_seconds,
            "max_diff": float((gated - compacted).abs().max()),
        })
    full_parameters = compaction.parameter_count(model)
    lines = [
        SECTION, "",
        f"- date: {dt.date.today().isoformat()}",
        f"- machine: {machine()}; torch threads: {args.threads}",
        f"- command: `python benchmarks/compaction.py --examples {args.examples} --threads {args.threads}`",
        f"- model: all-MiniLM-L6-v2 as a classifier ({layers} x {heads} heads), data: {source}, batches of 32 sorted by",
        "  length; seeded random masks; best of 3 passes. gated = the engine's gates at 0 (the same work as the full",
        "  model); compact = heads and MLPs cut out of the weights. max diff: largest |logit| difference gated vs compact.",
        f"- full model: {full_parameters / 1e6:.2f} M parameters, {full_seconds:.2f} s",
        "",
        "| heads and MLPs kept | heads | MLPs | parameters (M) | gated (s) | compact (s) | speed-up vs full | max diff |",
        "|---|---|---|---|---|---|---|---|",
        *[
            f"| {r['keep']:.0%} | {r['heads']} | {r['mlps']} | {r['parameters'] / 1e6:.2f} | {r['gated_s']:.2f} | "
            f"{r['compact_s']:.2f} | **{full_seconds / r['compact_s']:.2f}x** | {r['max_diff']:.1e} |"
            for r in rows
        ],
        "",
    ]
    write_section(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
