"""``fuzzdiff run``: a campaign's first-round plan, its schedule and loop, the
pools and workers its batches run in (this machine's processes, or a Ray
cluster), the shared example database, and its results and heatmap.
"""
