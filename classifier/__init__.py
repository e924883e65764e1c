"""AIO package: classifier."""
