import os

import torch

# Triton kernels run on CPU only in its interpreter, chosen by TRITON_INTERPRET=1 before `import triton`, and one
# process is either interpreted or compiled. Without a GPU the tests interpret. With one, Triton runs compiled here
# (the CUDA cases), and the CPU cases of the Triton tests, marked triton_interpreter, are skipped here and run in
# a second pytest process with the GPU hidden (tests/test_triton_interpreter.py).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# In-process servers do not probe their (random-weight) tiers in the background unless a test asks for it.
os.environ.setdefault("AIO_PROBE_ON_START", "false")

import pytest  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# The devices of a Triton test: its CPU case runs the kernels in the interpreter.
TRITON_DEVICES = [pytest.param("cpu", marks=pytest.mark.triton_interpreter)] + DEVICES[1:]


def triton_interpreted() -> bool:
    """Whether this process runs AIO's Triton kernels in the interpreter (imports triton; False without it)."""
    try:
        from tiers.attention.triton_paged_attention import unavailable_on
    except ImportError:
        return False
    return unavailable_on(torch.device("cpu")) is None


def pytest_configure(config):
    config.addinivalue_line("markers", "triton_interpreter: runs Triton kernels on CPU tensors, in the interpreter "
                                       "(on a GPU machine: in tests/test_triton_interpreter.py's process)")


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    skip_slow = pytest.mark.skip(reason="slow: set AIO_SLOW_TESTS=1 to run it")
    skip_compiled = pytest.mark.skip(reason="Triton runs compiled in this process: the CPU cases run in the "
                                            "interpreter in test_triton_interpreter.py's process (a GPU's)")
    compiled = None
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
        if "slow" in item.keywords and os.environ.get("AIO_SLOW_TESTS") != "1":
            item.add_marker(skip_slow)
        if "triton_interpreter" in item.keywords:
            compiled = not triton_interpreted() if compiled is None else compiled
            if compiled:
                item.add_marker(skip_compiled)


ARCHS = ["llama", "llama-tied", "qwen2", "mistral"]
# Large enough that random models have peaked logits: greedy ties would make token-exact checks flaky.
INIT_RANGE = 0.15


@pytest.fixture(scope="session")
def checkpoint_dir(tmp_path_factory):
    from tiers.checkpoints import create_random_checkpoint

    root = tmp_path_factory.mktemp("checkpoints")
    cache: dict[str, object] = {}

    def get(arch: str = "llama", **overrides):
        key = arch + repr(sorted(overrides.items()))
        if key not in cache:
            cache[key] = create_random_checkpoint(root / f"{arch}-{len(cache)}", arch, seed=0,
                                                  initializer_range=INIT_RANGE, **overrides)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def llama_path(checkpoint_dir):
    return checkpoint_dir("llama")


@pytest.fixture(scope="session")
def pair(tmp_path_factory):
    """(target, draft) sharing a tokenizer: the draft is the target's first layer; the target's two extra layers
    add small residuals, so acceptance is partial (about 0.5): both accepted runs (and the draft's catch-up) and
    rejections happen."""
    from tiers.checkpoints import create_draft_target_pair

    return create_draft_target_pair(tmp_path_factory.mktemp("pair"), draft_layers=1, extra_layers=2,
                                    residual_scale=0.1, initializer_range=INIT_RANGE)


@pytest.fixture(scope="module")
def one_thread():
    """For tiny models: a second thread buys nothing, and on a shared machine contended threads make every small op
    many times slower. Use with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- SQL: a throwaway PostgreSQL cluster (one per session) and a fresh database per test -----------------------

@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server of our own (see benchmarks/postgres.py). Skipped where PostgreSQL is not installed,
    unless AIO_REQUIRE_POSTGRES=1 (CI), where its absence fails the tests."""
    import atexit

    from benchmarks.postgres import PostgresServer, find_bin_dir

    bin_dir = find_bin_dir()
    if bin_dir is None:
        message = "PostgreSQL is not installed (no initdb/pg_ctl under /usr/lib/postgresql/*/bin or on PATH)"
        if os.environ.get("AIO_REQUIRE_POSTGRES") == "1":
            pytest.fail(message + ", and AIO_REQUIRE_POSTGRES=1", pytrace=False)
        pytest.skip(message)
    server = PostgresServer(bin_dir)
    atexit.register(server.close)  # should the session die before its teardown
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def postgres_database_factory(postgres_server):
    """`create(name="test") -> url`: a new empty database (named `name` plus a unique suffix) on the server."""
    import re
    import uuid

    def create(name: str = "test") -> str:
        safe = re.sub(r"[^a-z0-9_]", "_", name.lower())[:40]  # PostgreSQL cuts names at 63 bytes
        return postgres_server.create_database(f"{safe}_{uuid.uuid4().hex[:8]}")

    return create


@pytest.fixture(scope="session")
def postgres_url(postgres_database_factory):
    """One database shared by the session's tests."""
    return postgres_database_factory("shared")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    """A fresh, empty database on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'aio.db'}"
    return request.getfixturevalue("postgres_database_factory")(request.node.originalname)


@pytest.fixture
def sqlite_engine(tmp_path):
    """A migrated SQLite request log in the test's folder."""
    from aio.db.database import make_engine
    from aio.db.migrate import upgrade

    engine = make_engine(f"sqlite:///{tmp_path / 'aio.db'}")
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def admin_client(sqlite_engine):
    """The real admin router and key store on a migrated SQLite log, in a bare app (no tiers), every caller an
    admin."""
    from types import SimpleNamespace

    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from aio.db.keys import KeyStore
    from aio.server.errors import install_error_handlers
    from aio.server.routes import admin

    class AdminAllowed:
        async def admin(self, request) -> None:
            return None

    app = FastAPI()
    app.state.aio = SimpleNamespace(keys=KeyStore(sqlite_engine), auth=AdminAllowed())
    install_error_handlers(app)
    app.include_router(admin.router)
    with TestClient(app) as client:
        yield client
