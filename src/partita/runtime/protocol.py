"""Length-prefixed pickled messages over pipes, with deadlines on the reading side.

The parent must never block forever on a worker that hangs in a kernel, so reads wait with
``select`` until a deadline and raise :class:`TimeoutError`; a closed pipe (the worker died)
raises :class:`EOFError`. Messages are small dictionaries: arrays travel through files.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from typing import Any

HEADER = struct.Struct("<Q")


def encode(message: Any) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


def write_message(fd: int, message: Any) -> None:
    """Write one message to the file descriptor ``fd`` (blocking until all of it is written)."""
    data = memoryview(encode(message))
    while data:
        n = os.write(fd, data)
        data = data[n:]


class Reader:
    """Reads messages from a file descriptor, each within an optional deadline."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()

    def _fill(self, n: int, deadline: float | None) -> None:
        while len(self._buffer) < n:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                ready, _, _ = select.select([self.fd], [], [], remaining)
                if not ready:
                    raise TimeoutError
            chunk = os.read(self.fd, max(65536, n - len(self._buffer)))
            if not chunk:
                raise EOFError
            self._buffer += chunk

    def read(self, deadline: float | None = None) -> Any:
        """The next message; ``deadline`` is a :func:`time.monotonic` instant."""
        self._fill(HEADER.size, deadline)
        (size,) = HEADER.unpack_from(self._buffer)
        self._fill(HEADER.size + size, deadline)
        body = bytes(self._buffer[HEADER.size:HEADER.size + size])
        del self._buffer[:HEADER.size + size]
        return pickle.loads(body)
