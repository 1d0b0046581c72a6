"""PyTorch's ModuleInfo database (``module_db``) as fuzz targets (family
``moduleinfo``, names ``modules/<module>_<sample>[_eval]``): the adapter that
names them (all, some, one), a sample built as a target, the call its
records and scripts rebuild, and what fuzzdiff declares about modules.
"""
