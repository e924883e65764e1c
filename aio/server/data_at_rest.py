"""What `aio serve` keeps on disk is readable by its own user only: $AIO_HOME 0700, the SQLite database and the
log's spill and journal files 0600 (they hold prompts and answers); the admin key, when none is configured, is
generated into a 0600 file instead of being printed. Every command that opens the database (`aio keys create`
on a home made earlier with looser modes, ...) tightens them the same way first: `restrict_data`."""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

ADMIN_KEY_FILE = "admin-key"
PRIVATE_FILE_PATTERNS = ("aio.db*", "admin-key", "log-spill/*")


def restrict_home(home: Path) -> None:
    """Creates $AIO_HOME (0700) and tightens what is already in it; files created later get 0600 (umask 077)."""
    os.umask(0o077)
    home.mkdir(parents=True, exist_ok=True)
    _chmod(home, 0o700)
    spill = home / "log-spill"
    if spill.is_dir():
        _chmod(spill, 0o700)
    for pattern in PRIVATE_FILE_PATTERNS:
        for path in home.glob(pattern):
            if path.is_file():
                _chmod(path, 0o600)


def restrict_sqlite_file(database_url: str) -> None:
    """A SQLite database outside $AIO_HOME gets 0600 as well (with its -wal and -shm files)."""
    database = _sqlite_path(database_url)
    if database is None:
        return
    for path in database.parent.glob(database.name + "*"):
        if path.is_file():
            _chmod(path, 0o600)


def restrict_data(home: Path, database_url: str) -> None:
    """What a command that opens the database does first: $AIO_HOME as `aio serve` leaves it (created only when the
    SQLite database lives in it), and a SQLite database elsewhere 0600."""
    database = _sqlite_path(database_url)
    if home.is_dir() or database is not None and home.absolute() in database.parents:
        restrict_home(home)
    else:
        os.umask(0o077)
    restrict_sqlite_file(database_url)


def _sqlite_path(database_url: str) -> Path | None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(database_url)
    except ArgumentError:
        return None  # make_engine says what is wrong with it
    if url.get_backend_name() != "sqlite" or not url.database or url.database.startswith(("file:", ":memory:")):
        return None
    return Path(url.database).absolute()


def generated_admin_key(home: Path) -> tuple[str, Path]:
    """The admin key kept in $AIO_HOME/admin-key (0600), created on first use; stays the same across restarts."""
    path = home / ADMIN_KEY_FILE
    if path.is_file():
        key = path.read_text(encoding="utf-8").strip()
        if key:
            _chmod(path, 0o600)
            return key, path
    key = "aio-admin-" + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(key + "\n")
    return key, path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _chmod(path: Path, wanted: int) -> None:
    if mode(path) != wanted:
        os.chmod(path, wanted)
