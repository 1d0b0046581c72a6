"""fuzzdiff: property-based fuzzing of derivatives in PyTorch."""

__version__ = "0.1.0"
