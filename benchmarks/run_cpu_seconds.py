"""CPU and wall seconds per rule of one finished run, or of two side by side (the second over the first), from
Snakemake's benchmark files (``results/benchmarks/``): a comparison robust to other work sharing the cores, which
inflates wall time but hardly a job's CPU seconds.

    python benchmarks/run_cpu_seconds.py RUN_DIR [AFTER_RUN_DIR]
"""
import glob, sys
import polars as pl

def table(root):
    rows = []
    for f in glob.glob(f"{root}/results/benchmarks/**/*.tsv", recursive=True):
        d = pl.read_csv(f, separator="\t")
        rows.append((f.split("/benchmarks/")[1].split("/")[0].removesuffix(".tsv"), float(d["s"][0]), float(d["cpu_time"][0]), float(d["max_rss"][0])))
    return pl.DataFrame(rows, schema=["rule", "s", "cpu", "rss"], orient="row")

runs = sys.argv[1:]
tables = [table(r).group_by("rule").agg(pl.len().alias("jobs"), pl.col("s").sum(), pl.col("cpu").sum(), pl.col("rss").max()) for r in runs]
for r, t in zip(runs, tables):
    print(r, "jobs", t["jobs"].sum(), "job wall s", round(t["s"].sum()), "cpu s", round(t["cpu"].sum()))
if len(tables) == 2:
    j = tables[0].join(tables[1], on="rule", how="full", suffix="_after", coalesce=True).with_columns(
        (pl.col("cpu_after") / pl.col("cpu")).round(2).alias("cpu_ratio")).sort("cpu", descending=True)
    pl.Config.set_tbl_rows(60)
    print(j.select("rule", "jobs", "cpu", "jobs_after", "cpu_after", "cpu_ratio", "s", "s_after"))
else:
    pl.Config.set_tbl_rows(60)
    print(tables[0].sort("cpu", descending=True))
