"""AIO package: classifier.

Light at import (numpy and regexes only): the learned classifier, its encoder (torch) and the shipped default
load on first use of their names.
"""
from classifier.features import FEATURE_NAMES, TextFeatures, extract_features, feature_vector, messages_to_text
from classifier.heuristic import HeuristicClassifier

_LAZY = {
    "ClassifierError": "classifier.errors",
    "ComplexityClassifier": "classifier.learned",
    "load_folder": "classifier.learned",
    "load_default": "classifier.default_model",
    "DEFAULT_DIR": "classifier.default_model",
    "Encoder": "classifier.encoder",
    "routing_metrics": "classifier.routing_metrics",
}

__all__ = ["FEATURE_NAMES", "HeuristicClassifier", "TextFeatures", "extract_features", "feature_vector",
           "messages_to_text", *_LAZY]


def __getattr__(name: str):
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'classifier' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(module_name)
    value = module if module_name.endswith(name) else getattr(module, name)
    globals()[name] = value
    return value
