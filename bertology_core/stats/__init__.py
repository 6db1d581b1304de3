"""Statistics shared by the stages: the paired bootstrap and the tasks' metrics. Never imports torch."""
