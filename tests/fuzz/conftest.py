"""The CI sample's seed in the pytest header (tests/fuzz/sampling.py)."""

from sampling import ci_seed


def pytest_report_header(config):
    return (f"fuzzdiff: CI sample seed {ci_seed()} "
            f"(FUZZDIFF_CI_SEED={ci_seed()} reruns the same sample of sampled checks)")
