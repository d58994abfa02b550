"""Binding the command's HTTP address: a refusal says what to do and leaks no socket."""

from __future__ import annotations

import gc
import os
import socket
import warnings

import pytest

from operative.cli._errors import UsageError
from operative.cli._listen import handed_over, listen


def test_a_port_in_use_is_a_usage_error_and_closes_its_socket() -> None:
    """The refused socket is closed at once, not left to the garbage collector (which
    closes it with a ResourceWarning: hypercorn's own binding does that)."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with warnings.catch_warnings(record=True) as caught_warnings:
            warnings.simplefilter("always")
            with pytest.raises(UsageError, match=f"port {port} on 127.0.0.1 is in use") as caught:
                listen("127.0.0.1", port, host_flag="--host", port_flag="--port")
            gc.collect()
        assert "--port" in str(caught.value)
        assert [w for w in caught_warnings if issubclass(w.category, ResourceWarning)] == []
    finally:
        holder.close()


def test_an_address_this_machine_lacks_names_the_option_to_change() -> None:
    with pytest.raises(UsageError, match="--http") as caught:
        listen("192.0.2.1", 0, host_flag="--http", port_flag="--http port")
    assert "not an address of this machine" in str(caught.value)


def test_a_bound_socket_is_handed_over_by_file_descriptor() -> None:
    sockets = listen("127.0.0.1", 0, host_flag="--host", port_flag="--port")
    fd = sockets[0].fileno()
    binds = handed_over(sockets)
    try:
        assert binds == [f"fd://{fd}"]
        assert sockets[0].fileno() == -1  # hypercorn owns the descriptor now
    finally:
        os.close(fd)
