"""The promise measured end to end: savings at equal quality, the quality monitor against computed truth, a
retrain from its own verdicts, and the confidence cascade (`python -m benchmarks.end_to_end`)."""
