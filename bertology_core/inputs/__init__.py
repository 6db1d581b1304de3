"""Inputs: a model's inputs, from a task's examples to the device: tokenisation into token tables, padded batches, to_device."""
