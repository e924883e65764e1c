"""AIO package: classifier."""
from classifier.features import FEATURE_NAMES, TextFeatures, extract_features, feature_vector, messages_to_text
from classifier.heuristic import HeuristicClassifier

__all__ = ["FEATURE_NAMES", "HeuristicClassifier", "TextFeatures", "extract_features", "feature_vector",
           "messages_to_text"]
