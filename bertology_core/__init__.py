"""bertology_core: the importable library behind the bertology Snakemake workflow.

It knows nothing of Snakemake: every function takes plain paths, dataclasses and
values, so it can be used from a notebook or another pipeline.
"""

__version__ = "0.1.0"
