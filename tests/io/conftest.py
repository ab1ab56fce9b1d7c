"""Fixtures of the io tests."""
import pytest

from local_server import Server


@pytest.fixture
def server(monkeypatch):
    """A `Server`, reached without any proxy of the environment."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    server = Server()
    yield server
    server.close()
