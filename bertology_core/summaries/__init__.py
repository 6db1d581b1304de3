"""Summaries: how a stage's results reach a reader, shared by every stage and the report: the altair figures and the
tidy tables a stage writes, and the files each is written as. Never imports torch."""
