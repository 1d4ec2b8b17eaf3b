"""``scopemem serve --workers N``: N worker processes answering on one port.

One process is one event loop, one interpreter lock: past about one core of request
handling, a single worker cannot go faster however many cores the machine has. With
``--workers N`` the parent binds the listening socket, forks N processes that each build
their own store and serve the same socket (the kernel hands each new connection to one of
them), and supervises them:

* a worker that dies (killed, crashed) is replaced at once, so the port keeps answering;
  what it had acknowledged is in the store already, and a request it was answering got no
  answer, so its client retries (every write is one transaction: none is half-applied);
* SIGINT or SIGTERM to the parent is passed on to every worker, each finishes its in-flight
  requests and closes its store, and the parent exits when the last one has;
* a parent killed outright (SIGKILL) takes its workers with it on Linux (each asks the
  kernel for SIGTERM when its parent dies), so no worker goes on serving unsupervised;
* a worker that keeps failing to start (it exits by itself, not by a signal, within a
  second of starting, five times in a row: a store that cannot open, say) stops the whole
  server with an error rather than being restarted forever.

The parent forks before anything starts a thread or an event loop, and builds no store
itself, so each worker starts clean. Every worker may answer every scope: stores that
several processes share keep nothing one process could contradict another with (the SQLite
store checks its in-memory copies against each file's change counter; see its docs).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Callable

log = logging.getLogger("scopemem.worker")

__all__ = ["serve_workers"]

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A worker that dies within this many seconds of starting counts as failing to start.
_QUICK_DEATH_S = 1.0
_QUICK_DEATHS_ALLOWED = 5


def listening_socket(host: str, port: int) -> socket.socket:
    """The socket every worker accepts on, bound and listening before any worker starts (so
    connections made meanwhile wait in its backlog)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=1024)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve_workers(count: int, sock: socket.socket, run_worker: Callable[[socket.socket], None],
                  on_ready: Callable[[str], None]) -> int:
    """Fork ``count`` processes running ``run_worker(sock)`` and supervise them until
    SIGINT/SIGTERM; the exit status for the parent (0, or 1 when workers kept failing)."""
    workers: dict[int, float] = {}  # pid → when it started
    parent = os.getpid()
    stopping = False
    quick_deaths = 0

    def start() -> None:
        # The stop signals wait while forking: the new worker must be in ``workers`` before
        # ``stop`` can run (or it would never be told), and must not run ``stop`` itself.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:  # the worker
                _run_worker(run_worker, sock, parent)
            workers[pid] = time.monotonic()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        log.info("worker process %d started", pid)

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        log.info("stopping %d worker processes (%s)", len(workers),
                 signal.Signals(signum).name)
        for pid in list(workers):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    previous = {signum: signal.signal(signum, stop) for signum in _STOP_SIGNALS}
    try:
        for _ in range(count):
            start()
        on_ready(url_of(sock))
        while workers:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            started = workers.pop(pid, None)
            if started is None:
                continue
            if stopping:
                continue
            how = (f"signal {signal.Signals(-os.waitstatus_to_exitcode(status)).name}"
                   if os.WIFSIGNALED(status)
                   else f"exit status {os.waitstatus_to_exitcode(status)}")
            if not os.WIFSIGNALED(status) and time.monotonic() - started < _QUICK_DEATH_S:
                quick_deaths += 1
            else:
                quick_deaths = 0
            if quick_deaths >= _QUICK_DEATHS_ALLOWED:
                log.error("worker process %d ended (%s) right after starting, %d times in a"
                          " row: stopping", pid, how, quick_deaths)
                stop(signal.SIGTERM, None)
                continue
            log.warning("worker process %d ended (%s); starting another", pid, how)
            start()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sock.close()
    return 1 if quick_deaths >= _QUICK_DEATHS_ALLOWED else 0


def _run_worker(run_worker: Callable[[socket.socket], None], sock: socket.socket,
                parent: int) -> None:
    """In a forked worker: the stop signals back to their defaults (the worker's event loop
    installs its own), unblocked, then ``run_worker``; never returns."""
    code = 1
    try:
        for signum in _STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        _stop_with_parent(parent)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        run_worker(sock)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        log.exception("worker process %d failed", os.getpid())
    finally:
        logging.shutdown()
        os._exit(code)


def _stop_with_parent(parent: int) -> None:
    """Have the kernel send this worker SIGTERM when the parent dies (Linux), so a parent
    killed outright leaves no worker serving on its own; exit at once if it is gone
    already."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the worker outlives a killed parent
        pass
    if os.getppid() != parent:
        os._exit(0)
