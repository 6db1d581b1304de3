"""Data: declared tasks (GLUE's nine and any other) and UD treebanks read and checked, word pieces, the vocabulary of model states, atomic file output. Never imports torch."""
