"""One ``fuzzdiff.check`` call: its checks run until they find nothing new,
its time budget shared among them, its progress, the inputs outside the
function's domain, and the Report it returns.
"""
