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

import ctypes
import ctypes.util
import mmap
import os
from typing import Any

# Two copies of the 48-byte WalIndexHdr; isInit is the byte at offset 12 of each.
_HEADER = 48
_IS_INIT = 12
_SIZE = 2 * _HEADER


def _libc() -> Any:
    """The C library's ``mmap`` and ``munmap``, or None. Python's own ``mmap`` keeps a
    duplicate of the file descriptor for the map's whole life (before Python 3.13's
    ``trackfd``): a fourth descriptor per open scope, which the open-file budget
    (``files.default_max_open``) does not allow for. A map made here keeps none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long)
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    except (OSError, AttributeError, TypeError):
        return None
    return libc


_LIBC = _libc()
_FAILED = ctypes.c_void_p(-1).value


class WalHeader:
    """A read-only map of one scope file's WAL-index header (no descriptor kept)."""

    __slots__ = ("_address", "_bytes", "_mapped")

    def __init__(self, address: int) -> None:
        self._mapped = address  # unmapped only when nothing refers to the map any more
        self._address: int | None = address
        self._bytes = (ctypes.c_char * _SIZE).from_address(address)

    @classmethod
    def open(cls, database_path: str) -> WalHeader | None:
        """The map of ``database_path``'s ``-shm`` file, or None when it cannot be made (no
        such file yet, too short, no C library to map it with): the caller then probes
        every time."""
        if _LIBC is None:
            return None
        try:
            fd = os.open(database_path + "-shm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            if os.fstat(fd).st_size < _SIZE:
                return None
            address = _LIBC.mmap(None, _SIZE, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        except OSError:
            return None
        finally:
            os.close(fd)  # the map stays valid without the descriptor
        if address is None or address == _FAILED:
            return None
        return cls(address)

    def read(self) -> bytes | None:
        """The header as it stands, or None while a writer is updating it (the two copies
        differ), before the WAL-index is initialized, or once closed."""
        if self._address is None:
            return None
        both = self._bytes.raw  # a copy of the memory: no call, no lock handed over
        first = both[:_HEADER]
        if first != both[_HEADER:] or not first[_IS_INIT]:
            return None
        return first

    def close(self) -> None:
        """Stop answering (``read`` says None from now on). The memory is unmapped once no
        thread holds the map, so a read already under way on another thread still reads
        mapped memory."""
        self._address = None

    def __del__(self) -> None:
        if _LIBC is not None:
            _LIBC.munmap(self._mapped, _SIZE)
