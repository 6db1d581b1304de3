"""The fitness stage: its model-running side (imports torch) and its torch-free tables."""
