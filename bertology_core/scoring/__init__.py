"""Scoring: a model's logits under engine plans, the one forward loop every stage that measures configurations runs."""
