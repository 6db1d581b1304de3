# The treebank stage's input functions, report section, targets and checks; its rules are in
# rules/treebank.smk (Snakemake's linter asks rules and functions to live in separate files).


TREEBANK_DOWNLOADED = "results/treebank/source"


def treebank_file(split):
    """A split's CoNLL-U file: in treebank.dir, or downloaded from treebank.url (rule download_treebank)."""
    name = config["treebank"]["files"][split]
    return Path(TREEBANK_DOWNLOADED) / name if config["treebank"]["url"] else repo_path(config["treebank"]["dir"]) / name


if config["treebank"]["dir"] and config["treebank"]["url"]:
    raise WorkflowError("config 'treebank': both dir and url are set. Fix: set the one the files come from, the other to null.")


TREEBANK_SPLITS = list(config["treebank"]["files"]) if config["treebank"]["dir"] or config["treebank"]["url"] else []


_missing = [str(treebank_file(s)) for s in TREEBANK_SPLITS if config["treebank"]["dir"] and not treebank_file(s).is_file()]


if _missing:
    raise WorkflowError(
        "config 'treebank': CoNLL-U file(s) not found:\n  " + "\n  ".join(_missing)
        + "\nFix: point treebank.dir (and treebank.files) at a UD treebank, e.g. a checkout of "
        "UD_English-EWT, or set treebank.dir: null to skip the treebank stages."
    )


@check("data")


def treebank_problems():
    """Format and encoding of the local CoNLL-U files (downloads: checked by prepare_treebank)."""
    problems = []
    for split in TREEBANK_SPLITS if config["treebank"]["dir"] else []:
        try:
            treebank.validate(treebank_file(split))
        except treebank.TreebankError as error:
            problems.append(str(error))
    return problems


# the treebank's splits: parsed from no model, scheduled before the fitness checkpoint
TARGETS.append(lambda model: [f"results/treebank/{split}.parquet" for split in TREEBANK_SPLITS])


EARLY_TARGETS.append(lambda model: [f"results/treebank/{split}.parquet" for split in TREEBANK_SPLITS])
