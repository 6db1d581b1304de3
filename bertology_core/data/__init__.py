"""Data: GLUE tasks and UD treebanks read and checked, word pieces, the vocabulary of model states, atomic file output. Never imports torch."""
