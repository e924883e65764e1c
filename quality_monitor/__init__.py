"""AIO package: quality_monitor."""
