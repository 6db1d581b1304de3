"""Data preparation at QQP's size: peak memory and time of one ``prepare_data`` job (every split read and checked,
examples in two splits looked for, the training split written) on synthetic files in QQP's GLUE layout at its
published sizes (363,846 training and 40,430 dev pairs; QQP's files are not on this machine), in a fresh process,
against the bytes of the files it reads and of the frame it keeps.

    python benchmarks/prepare_data_scale.py [--train 363846] [--dev 40430] [--out BENCHMARKS.md]

Writes (replaces) the section "Data preparation at QQP's size" of BENCHMARKS.md.
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

SECTION = "## Data preparation at QQP's size"
REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from bertology_core.data import tasks
from bertology_core.data.io import write_parquet

imported_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
started, cpu = time.monotonic(), time.process_time()
task = tasks.glue_task("QQP", {glue!r})
frame = tasks.prepare_files(task, "train", None, 0)
write_parquet(frame, {glue!r} + "/train.parquet")
print(json.dumps({{"rows": frame.height, "frame_mb": frame.estimated_size() / 2**20, "imported_mb": imported_mb,
                   "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                   "wall_s": time.monotonic() - started, "cpu_s": time.process_time() - cpu}}))
"""


def question(rng: np.random.Generator, vocabulary: np.ndarray) -> str:
    """A question of QQP's typical length (about 11 words)."""
    return " ".join(rng.choice(vocabulary, size=int(rng.integers(5, 18)))) + " ?"


def write_qqp(folder: Path, sizes: dict[str, int]) -> int:
    """QQP's GLUE layout (id, qid1, qid2, question1, question2, is_duplicate) with distinct random questions; the
    bytes written."""
    rng = np.random.default_rng(0)
    vocabulary = np.array([f"w{i}" for i in range(20000)])
    (folder / "QQP").mkdir(parents=True)
    written, start = 0, 0
    for split, rows in sizes.items():
        path = folder / "QQP" / f"{split}.tsv"
        with path.open("w") as out:
            out.write("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n")
            for i in range(start, start + rows):
                out.write(f"{i}\t{2 * i}\t{2 * i + 1}\t{question(rng, vocabulary)}\t{question(rng, vocabulary)}\t{int(rng.integers(0, 2))}\n")
        start += rows
        written += path.stat().st_size
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=363846)
    parser.add_argument("--dev", type=int, default=40430)
    parser.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        files = write_qqp(Path(folder), {"train": args.train, "dev": args.dev})
        out = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO), glue=folder)],
                             capture_output=True, text=True, check=True).stdout
    run = json.loads(out.strip().splitlines()[-1])
    lines = [SECTION, "",
             f"Machine: {cpu_name()}, {dt.date.today()}; command: "
             f"`python benchmarks/prepare_data_scale.py --train {args.train} --dev {args.dev}`.", "",
             f"One `prepare_data` job of QQP's training split (`tasks.prepare_files`: both splits read and checked, every "
             f"dev pair looked for among the training pairs, the split written to Parquet) on synthetic files in QQP's "
             f"GLUE layout at its published sizes ({args.train:,} training and {args.dev:,} dev pairs, distinct random "
             f"questions of 5-17 words), in a fresh process:", "",
             "| files read (MB) | frame kept (MB) | peak RSS (MB) | of which the imports | wall s | CPU s |",
             "|---|---|---|---|---|---|",
             f"| {files / 2**20:.0f} | {run['frame_mb']:.0f} | {run['peak_mb']:.0f} | {run['imported_mb']:.0f} | "
             f"{run['wall_s']:.1f} | {run['cpu_s']:.1f} |", "",
             f"The job's own part is {(run['peak_mb'] - run['imported_mb']) / (files / 2**20):.1f}x the bytes it reads; "
             "`compute.mem_mb.prepare_data` is 2,000. The workflow's parse-time data check reads the same splits once "
             "per task in the main process.", ""]
    write_section(Path(args.out), "\n".join(lines))


if __name__ == "__main__":
    main()
