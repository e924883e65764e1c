"""The learned classifier's error."""


class ClassifierError(ValueError):
    """Bad training input, or a classifier folder that cannot be loaded."""
