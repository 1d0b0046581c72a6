"""matmul targets (to be filled)."""
