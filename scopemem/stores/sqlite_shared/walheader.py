"""Seeing that nobody has committed to a shard file, without a call into SQLite.

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
* a later retrieval reads the header from memory (no system call, no release of the
  interpreter lock) and, when it is byte for byte the one kept, no commit has completed
  since: the view answers without a probe;
* anything else (another header, copies that differ while a writer updates them, no map)
  means "probe as before", and a probe that finds the generation unchanged (a save of use
  counts commits without changing rows) keeps the new header.

A commit in flight (frames written, header not yet) is not yet visible to any reader, so
answering without it is answering before it.

The memory read is SQLite's own map of the ``-shm`` file, asked of the connection's file
through the VFS's documented ``xShmMap`` method (region 0, never extended), not a map of our
own. Opening the ``-shm`` file ourselves would mean closing that descriptor again, and
closing *any* descriptor of a file drops every POSIX lock the process holds on it: SQLite's
locks on the ``-shm`` file. Its shared lock there tells a process opening the file that
the shared memory is in use (without it, that process takes itself for the first opener
and truncates and rebuilds it under our connection), and inside a transaction its write
lock keeps another process from writing at the same time. SQLite's map keeps no
descriptor of its own and stays where it is until the connection closes, so the handle
stops reading it (``close``) before closing the connection.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from scopemem.stores.sqlite_shared import sql

# Two copies of the 48-byte WalIndexHdr; isInit is the byte at offset 12 of each.
_HEADER = 48
_IS_INIT = 12
_SIZE = 2 * _HEADER
_REGION_BYTES = 32768  # a wal-index region: what every SQLite asks xShmMap for
_SHM_MAP_VERSION = 2  # sqlite3_io_methods version from which xShmMap is there


class _IoMethods(ctypes.Structure):
    """The head of ``sqlite3_io_methods`` (sqlite3.h), up to ``xShmMap``."""

    _fields_ = [("iVersion", ctypes.c_int)] + [(name, ctypes.c_void_p) for name in (
        "xClose", "xRead", "xWrite", "xTruncate", "xSync", "xFileSize", "xLock", "xUnlock",
        "xCheckReservedLock", "xFileControl", "xSectorSize", "xDeviceCharacteristics",
        "xShmMap")]


class _File(ctypes.Structure):
    """The head of ``sqlite3_file``: its methods."""

    _fields_ = [("pMethods", ctypes.POINTER(_IoMethods))]


_ShmMap = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                           ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))


def _shm_region(conn: Any, in_wal: bool) -> int | None:
    """The address of SQLite's map of the connection's wal-index (region 0), or None when it
    has none (not in WAL mode, not read yet, a VFS without shared memory)."""
    apsw = sql.apsw_module()
    file = ctypes.c_void_p()
    try:
        # Only a connection in WAL mode has a wal-index to map (asked of any other, the VFS
        # would make one).
        if not in_wal and str(conn.execute("PRAGMA journal_mode").fetchall()[0][0]).lower(
                ) != "wal":
            return None
        if not conn.file_control("main", apsw.SQLITE_FCNTL_FILE_POINTER,
                                 ctypes.addressof(file)):
            return None
    except apsw.Error:
        return None
    if not file.value:
        return None
    methods = ctypes.cast(file, ctypes.POINTER(_File)).contents.pMethods
    if not methods or methods.contents.iVersion < _SHM_MAP_VERSION:
        return None
    shm_map = methods.contents.xShmMap
    if not shm_map:
        return None
    region = ctypes.c_void_p()
    # bExtend = 0: an existing region's address, never a new one.
    if _ShmMap(shm_map)(file, 0, _REGION_BYTES, 0, ctypes.byref(region)) != 0:
        return None
    return region.value or None


class WalHeader:
    """A scope file's WAL-index header, read from SQLite's own map of it."""

    __slots__ = ("_bytes", "_lock")

    def __init__(self, address: int) -> None:
        self._lock = threading.Lock()  # a read never overlaps the close before the unmap
        self._bytes: Any = (ctypes.c_char * _SIZE).from_address(address)

    @classmethod
    def open(cls, conn: Any, *, in_wal: bool = False) -> WalHeader | None:
        """The header of ``conn``'s file, or None when it cannot be read this way (the
        caller then probes every time). The caller holds the connection: no other thread
        is using it. ``in_wal``: the caller knows the connection is in WAL mode, and it is
        not asked again (the store's are: opening refuses a file that cannot switch)."""
        address = _shm_region(conn, in_wal)
        return None if address is None else cls(address)

    def read(self) -> bytes | None:
        """The header as it stands, or None while a writer is updating it (the two copies
        differ), before the WAL-index is initialized, or once closed."""
        with self._lock:
            if self._bytes is None:
                return None
            both: bytes = self._bytes.raw  # a copy of the memory: no call, no lock handed over
        first = both[:_HEADER]
        if first != both[_HEADER:] or not first[_IS_INIT]:
            return None
        return first

    def close(self) -> None:
        """Stop reading (``read`` says None from now on): called before the connection
        closes, which unmaps the memory."""
        with self._lock:
            self._bytes = None
