"""A static, offline HTML page for labelling attention maps with the five pattern classes.

The page holds a seeded sample of maps (8-bit, downsampled to at most ``max_side`` pixels a side,
base64 in the page) and needs nothing but a browser opened on the file: keys 1-5 label the
current map and move on, arrow keys move, Export downloads ``labels.csv`` with the columns
``task, state, idx, layer, head, label`` that the CNN trains on, and Import reads such a file back
(to continue or review). Labels are also kept in the browser's localStorage per page.
The CSV names each map by ``task, state, idx, layer, head`` (the example's idx, not the dump's example number),
the keys :mod:`bertology_core.patterns.label_tables` reads.
"""

from __future__ import annotations

import base64
import html
import json

import numpy as np

from bertology_core.patterns.feature_tables import CLASSES

KEYS = {str(i + 1): name for i, name in enumerate(CLASSES)}


def encode_map(attention: np.ndarray, max_side: int = 64) -> dict[str, object]:
    """8-bit, linear, scaled to the map's largest weight (as the label sheets of
    :func:`bertology_core.patterns.label_tables.label_sheet`, so labels made with either are made alike),
    block-averaged to ``max_side``."""
    length = attention.shape[0]
    factor = int(np.ceil(length / max_side))
    if factor > 1:
        padded = np.zeros((factor * int(np.ceil(length / factor)),) * 2, dtype=np.float32)
        padded[:length, :length] = attention
        side = padded.shape[0] // factor
        attention = padded.reshape(side, factor, side, factor).mean(axis=(1, 3))
    scaled = np.clip(attention / max(float(attention.max()), 1e-9), 0, 1)
    pixels = np.round(scaled * 255).astype(np.uint8)
    return {"side": int(pixels.shape[0]), "pixels": base64.b64encode(pixels.tobytes()).decode()}


def annotation_page(items: list[dict[str, object]], title: str = "Attention pattern annotation") -> str:
    """The page for ``items``: dicts with ``task, state, idx, layer, head``, ``tokens`` (list of str) and the
    output of :func:`encode_map` (``side``, ``pixels``)."""
    data = json.dumps(items, separators=(",", ":"))
    legend = " ".join(f"<kbd>{key}</kbd> {name.replace('_', '+')}" for key, name in KEYS.items())
    return PAGE.replace("{{TITLE}}", html.escape(title)).replace("{{LEGEND}}", legend).replace(
        "{{DATA}}", data.replace("</", "<\\/")
    ).replace("{{CLASSES}}", json.dumps(list(CLASSES)))


PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{TITLE}}</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;max-width:1100px}
#main{display:flex;gap:2em;align-items:flex-start}
canvas#big{width:384px;height:384px;image-rendering:pixelated;border:1px solid #999}
#strip{display:flex;flex-wrap:wrap;gap:4px;margin-top:1em}
#strip canvas{width:48px;height:48px;image-rendering:pixelated;border:2px solid #ddd;cursor:pointer}
#strip canvas.current{border-color:#d33}#strip canvas.done{border-color:#3a3}
kbd{border:1px solid #aaa;border-radius:3px;padding:0 4px;background:#f6f6f6}
#tokens{font-family:monospace;font-size:12px;max-width:520px;word-wrap:break-word;color:#444}
#label{font-size:20px;font-weight:bold}
</style></head><body>
<h1>{{TITLE}}</h1>
<p>Label the current map with a key: {{LEGEND}}. <kbd>&larr;</kbd>/<kbd>&rarr;</kbd> move.
Rows are queries, columns keys; darker = more attention (linear, scaled to the map's largest weight).</p>
<p><span id="progress"></span> &middot; <button id="export">Export labels.csv</button>
<label>Import CSV <input type="file" id="import" accept=".csv,text/csv"></label></p>
<div id="main"><canvas id="big"></canvas>
<div><div id="where"></div><div id="label"></div><p id="tokens"></p></div></div>
<div id="strip"></div>
<script>
const ITEMS = {{DATA}};
const CLASSES = {{CLASSES}};
const key = it => [it.task, it.state, it.idx, it.layer, it.head].join("|");
const storage = "bertology-labels:" + location.pathname;
let labels = {};
try { labels = JSON.parse(localStorage.getItem(storage) || "{}"); } catch (e) { labels = {}; }
let current = 0;
function pixels(it) { return Uint8Array.from(atob(it.pixels), c => c.charCodeAt(0)); }
function draw(canvas, it) {
  canvas.width = it.side; canvas.height = it.side;
  const ctx = canvas.getContext("2d"), img = ctx.createImageData(it.side, it.side), p = pixels(it);
  for (let i = 0; i < p.length; i++) { const v = 255 - p[i]; img.data.set([v, v, v, 255], 4 * i); }
  ctx.putImageData(img, 0, 0);
}
const strip = document.getElementById("strip");
const thumbs = ITEMS.map((it, i) => { const c = document.createElement("canvas"); draw(c, it);
  c.title = key(it); c.onclick = () => show(i); strip.appendChild(c); return c; });
function save() { localStorage.setItem(storage, JSON.stringify(labels)); }
function show(i) {
  current = Math.max(0, Math.min(ITEMS.length - 1, i));
  const it = ITEMS[current];
  draw(document.getElementById("big"), it);
  document.getElementById("where").textContent =
    `map ${current + 1} of ${ITEMS.length}: ${it.task} ${it.state}, example idx ${it.idx}, layer ${it.layer}, head ${it.head}`;
  document.getElementById("label").textContent = labels[key(it)] ? "label: " + labels[key(it)] : "unlabelled";
  document.getElementById("tokens").textContent = it.tokens.join(" ");
  thumbs.forEach((t, j) => { t.className = (j === current ? "current " : "") + (labels[key(ITEMS[j])] ? "done" : ""); });
  const n = ITEMS.filter(x => labels[key(x)]).length;
  document.getElementById("progress").textContent = `${n} of ${ITEMS.length} labelled`;
}
document.addEventListener("keydown", e => {
  if (e.target.tagName === "INPUT") return;
  const n = parseInt(e.key, 10);
  if (n >= 1 && n <= CLASSES.length) { labels[key(ITEMS[current])] = CLASSES[n - 1]; save(); show(current + 1); }
  else if (e.key === "ArrowRight") show(current + 1);
  else if (e.key === "ArrowLeft") show(current - 1);
});
function csv() {
  const rows = ["task,state,idx,layer,head,label"];
  for (const it of ITEMS) if (labels[key(it)]) rows.push([it.task, it.state, it.idx, it.layer, it.head, labels[key(it)]].join(","));
  return rows.join("\n") + "\n";
}
document.getElementById("export").onclick = () => {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([csv()], {type: "text/csv"}));
  a.download = "labels.csv"; document.body.appendChild(a); a.click(); a.remove();
};
document.getElementById("import").onchange = async e => {
  const text = await e.target.files[0].text();
  const lines = text.trim().split(/\r?\n/); const head = lines.shift().split(",");
  const col = name => head.indexOf(name);
  for (const line of lines) { const f = line.split(",");
    const label = f[col("label")];
    if (CLASSES.includes(label)) labels[[f[col("task")], f[col("state")], f[col("idx")], f[col("layer")], f[col("head")]].join("|")] = label; }
  save(); show(current);
};
show(0);
</script></body></html>
"""
