"""The attention engine: the only code that touches a model's internals (its structure, attention, and edits to heads, layers and LayerNorm dimensions)."""
