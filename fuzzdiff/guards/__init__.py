"""Torch's process around a run: its thread-local state kept and put back, its
log messages counted, IEEE float32 on CUDA and a lost CUDA context, timeouts,
and what a raised error means (torch's machinery, or "cannot do that").
"""
