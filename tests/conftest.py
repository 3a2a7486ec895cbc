"""Shared fixtures: no network beyond loopback, and small archives built by real runs."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _is_loopback(address: object) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return isinstance(address, (str, bytes))  # AF_UNIX paths


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests may talk to loopback servers they start, never to the outside network."""
    real_connect = socket.socket.connect

    def guarded(self: socket.socket, address: object) -> object:
        if not _is_loopback(address):
            raise RuntimeError(f"test tried to reach the network: {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)


@pytest.fixture
def repo() -> Path:
    """The checkout root (cards, contracts, corpora live here)."""
    return REPO


@pytest.fixture(autouse=True)
def _instant_retry_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retry waits are recorded as computed but not slept, so retry tests stay fast."""
    async def no_sleep(seconds: float) -> None:
        return None

    monkeypatch.setattr("draligned.models.retry.SLEEP", no_sleep)
