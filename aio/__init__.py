"""AIO package: aio."""
