"""Statistics shared by the stages: the paired bootstrap and the GLUE metrics. Never imports torch."""
