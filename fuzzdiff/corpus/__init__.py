"""What is done with records: replay without Hypothesis and promotion to a
regression test, a whole corpus replayed on the torch at hand, records grouped
into root causes, upstream bug reports, and the discrepancies page.
"""
