"""softmax targets (to be filled)."""
