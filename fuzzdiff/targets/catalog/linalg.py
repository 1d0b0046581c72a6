"""linalg targets (to be filled)."""
