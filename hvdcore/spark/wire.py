"""The messages between ``hvdcore.spark.run``'s driver and its Spark tasks: JSON objects, each
sent as a 4-byte big-endian length and the object's UTF-8 text, over one TCP connection a task
opens to the driver. Output lines travel as text decoded from Latin-1, so any bytes a rank
writes come back unchanged. This module imports nothing but the standard library: the tasks
load it inside Spark's Python workers."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

__all__ = ["send", "receive", "to_text", "to_bytes"]

_LENGTH = struct.Struct(">I")
_LIMIT = 64 << 20  # a message larger than this is no message of ours


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one message (a JSON object)."""
    data = json.dumps(message).encode()
    sock.sendall(_LENGTH.pack(len(data)) + data)


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:  # closed under us (the task ended), or reset by the peer
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def receive(sock: socket.socket) -> dict[str, Any] | None:
    """The next message, or None once the connection closed (or the peer sent garbage)."""
    head = _exactly(sock, _LENGTH.size)
    if head is None:
        return None
    (size,) = _LENGTH.unpack(head)
    if size > _LIMIT:
        return None
    body = _exactly(sock, size)
    if body is None:
        return None
    try:
        message = json.loads(body)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def to_text(data: bytes) -> str:
    """Bytes as JSON-safe text (Latin-1: one character per byte)."""
    return data.decode("latin-1")


def to_bytes(text: str) -> bytes:
    """The bytes :func:`to_text` was given."""
    return text.encode("latin-1")
