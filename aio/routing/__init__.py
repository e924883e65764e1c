"""Routing: the classifier's life cycle, from scoring a request to replacing the classifier.

- `router`: `Router.decide` picks the cheapest tier from the classifier's per-tier probabilities.
- `batcher`: `ClassifierBatcher` scores concurrent requests in micro-batches on one worker (the server's path).
- `loader`: `load_classifier`, the classifier that routes (pinned folder, active version, shipped default).
- `registry`: classifier versions and router thresholds in the SQL database (promotion, rollback).
- `watch`: `RouterWatcher` keeps a running router in step with the registry (hot swap, thresholds).
- `calibrate`: `aio router calibrate`, the threshold for a target large-tier share.
- `retrain`: `aio retrain`, a candidate classifier from the quality monitor's verdicts, promoted if not worse.
"""
from aio.routing.batcher import ClassifierBatcher
from aio.routing.loader import ClassifierLoadError, load_classifier, load_version
from aio.routing.router import Classifier, Router, RoutingDecision
from aio.routing.watch import RouterWatcher

__all__ = ["Classifier", "ClassifierBatcher", "ClassifierLoadError", "Router", "RouterWatcher", "RoutingDecision",
           "load_classifier", "load_version"]
