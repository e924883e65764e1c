"""Alembic migrations for the AIO SQL log. Run them with `aio db upgrade` or `aio.db.migrate.upgrade(url)`."""
