"""Seeing that nobody has committed to a scope's file, without a call into SQLite.

A view may answer only while its scope's rows are as it read them, and checking that with a
read of the file's ``generation`` row (``views._probe``) is a call into SQLite on the event
loop. Alone it costs a few microseconds; but SQLite calls release the interpreter lock, and
while pool threads run Python code, taking it back costs up to a switch interval (a
millisecond or more). Over many scopes nearly every retrieval paid that.

In WAL mode every commit, by any process, ends by writing the *WAL-index header* at the start
of the scope's ``-shm`` file (SQLite's documented wal-index format, which every SQLite
version sharing a file must agree on): the frame count ``mxFrame``, the change counter
``iChange`` and the WAL's salts all move with each commit, and the header is written twice,
the second copy first, so a reader that finds the two copies equal has read a whole one. So:

* when a view's generation is confirmed (built, carried on, or probed), the header read
  *just before* that confirmation is kept with it;
* a later retrieval reads the header from a read-only memory map of the ``-shm`` file (no
  system call, no release of the interpreter lock) and, when it is byte for byte the one
  kept, no commit has completed since: the view answers without a probe;
* anything else (another header, copies that differ while a writer updates them, a map that
  cannot be made) means "probe as before", and a probe that finds the generation unchanged
  (a save of use counts commits without changing rows) keeps the new header.

A commit in flight (frames written, header not yet) is not yet visible to any reader, so
answering without it is answering before it. The map lives as long as the handle's own
connection, which keeps the ``-shm`` file from being removed meanwhile.
"""

from __future__ import annotations

import mmap
import os

# Two copies of the 48-byte WalIndexHdr; isInit is the byte at offset 12 of each.
_HEADER = 48
_IS_INIT = 12


class WalHeader:
    """A read-only map of one scope file's WAL-index header."""

    __slots__ = ("_map",)

    def __init__(self, view: mmap.mmap) -> None:
        self._map = view

    @classmethod
    def open(cls, database_path: str) -> WalHeader | None:
        """The map of ``database_path``'s ``-shm`` file, or None when it cannot be made (no
        such file yet, too short, not mappable): the caller then probes every time."""
        try:
            fd = os.open(database_path + "-shm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            if os.fstat(fd).st_size < 2 * _HEADER:
                return None
            return cls(mmap.mmap(fd, 2 * _HEADER, access=mmap.ACCESS_READ))
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)  # the map stays valid without the descriptor

    def read(self) -> bytes | None:
        """The header as it stands, or None while a writer is updating it (the two copies
        differ) or before the WAL-index is initialized."""
        view = self._map
        try:
            first = view[:_HEADER]
            second = view[_HEADER:2 * _HEADER]
        except ValueError:  # closed
            return None
        if first != second or not first[_IS_INIT]:
            return None
        return first

    def close(self) -> None:
        self._map.close()
