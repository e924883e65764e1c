"""Benchmarks and load tests. Scripts, not product code: run them from the repository root.

    python -m benchmarks.engine        # engine vs transformers throughput and batch-1 decode
    python -m benchmarks.gpu           # the same and more on a GPU (issue 27), with checkpoints built there
    python -m benchmarks.speculative   # speculative decoding; --pair family: the real Qwen 0.5B / 1.5B pair
    python -m benchmarks.loadtest      # concurrent streaming clients against `aio serve`, then a SQL-log audit
    python -m benchmarks.dashboard     # every /api/dashboard endpoint against a large SQL log
    python -m benchmarks.classifier    # classifier training and predict_proba timings

Each takes --help. Built checkpoints and databases are cached in .bench/ (git-ignored).
"""
