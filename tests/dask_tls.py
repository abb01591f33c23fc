"""Checks that a Dask scheduler on TLS refuses a client without the right certificate, shared by
the tests of its configuration (tests/test_service_setup.py) and of the running service
(tests/test_service.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


def refused_without_the_certificate(address: str, folder: Path) -> None:
    """A client that trusts the scheduler's authority but shows no certificate, one that shows
    another authority's, and one speaking plain TCP: each is refused."""
    from dask.distributed import Client
    from distributed.security import Security

    host, port = address.removeprefix("tls://").split(":")
    assert tls_refused_without_certificate(host, int(port), folder / "ca.pem")
    with pytest.raises(OSError):  # another authority's certificate (Dask's throwaway one)
        Client(address, security=Security.temporary(), timeout=5)
    with pytest.raises(OSError):  # no TLS at all
        Client(address.replace("tls://", "tcp://"), timeout=5)


def tls_refused_without_certificate(host: str, port: int, ca: Path) -> bool:
    """Whether a TLS client that trusts ``ca`` but shows no certificate of its own is refused
    (TLS 1.3: the alert comes with the first read) rather than answered; a port nobody listens
    on is no refusal."""
    import ssl

    context = ssl.create_default_context(cafile=str(ca))
    try:
        with (
            socket.create_connection((host, port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            tls.sendall(b"\0" * 8)
            return tls.recv(1) == b""
    except ConnectionRefusedError:
        return False
    except (ssl.SSLError, ConnectionError):
        return True
