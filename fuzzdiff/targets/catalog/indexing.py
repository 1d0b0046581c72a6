"""indexing targets (to be filled)."""
