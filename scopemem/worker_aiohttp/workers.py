"""``scopemem serve --workers N``: N worker processes answering on one port.

One process is one event loop, one interpreter lock: past about one core of request
handling, a single worker cannot go faster however many cores the machine has. With
``--workers N`` the parent reserves the port, forks N processes that each build their own
store and listen on that port with a socket of their own (``SO_REUSEPORT``: the kernel
spreads new connections across the processes, where one shared socket let whichever process
woke first accept a whole burst of them), announces the port once a worker listens, and
supervises them:

* a worker that dies (killed, crashed) is replaced at once, and the others keep answering;
  what it had acknowledged is in the store already, and a request it was answering, or a
  connection it had not accepted yet, got no answer, so its client retries (every write is
  one transaction: none is half-applied);
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
import select
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


#: How a worker is run: ``run_worker(announce)`` serves until told to stop, calling
#: ``announce()`` once it listens.
RunWorker = Callable[[Callable[[], None]], None]


def reserved_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0 picks a free port) that never listens: it holds
    the port for the workers, each of which binds a listening socket of its own to it with
    ``SO_REUSEPORT``. A port something already listens on is refused here (``OSError``), as
    one process's bind would refuse it: a second server never shares a port by mistake."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Bound without SO_REUSEPORT first, so a listener already on the port is an error
    # rather than a peer; then the port is reserved with it, for the workers to join.
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        port = probe.getsockname()[1]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve_workers(count: int, sock: socket.socket, run_worker: RunWorker,
                  on_ready: Callable[[str], None]) -> int:
    """Fork ``count`` processes running ``run_worker`` on the port ``sock`` reserves
    (``reserved_port``), call ``on_ready(url)`` once one of them listens, and supervise them
    until SIGINT/SIGTERM; the exit status for the parent (0, or 1 when workers kept
    failing)."""
    workers: dict[int, float] = {}  # pid → when it started
    parent = os.getpid()
    stopping = False
    quick_deaths = 0
    # Each worker writes a byte here once it listens; the parent reads the first.
    listening, announce_end = os.pipe()
    os.set_blocking(announce_end, False)

    def announce() -> None:
        with contextlib.suppress(OSError):  # the parent has its byte: later ones may not fit
            os.write(announce_end, b".")

    def start() -> None:
        # The stop signals wait while forking: the new worker must be in ``workers`` before
        # ``stop`` can run (or it would never be told), and must not run ``stop`` itself.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:  # the worker
                _run_worker(run_worker, announce, parent)
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
        announced = False
        while workers:
            if not announced and select.select([listening], [], [], 0.05)[0]:
                announced = True
                on_ready(url_of(sock))
            try:
                # Until a worker listens, a worker's end is looked for between the looks
                # at the pipe; after, it is waited for.
                pid, status = os.waitpid(-1, 0 if announced else os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                continue
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
        os.close(listening)
        os.close(announce_end)
    return 1 if quick_deaths >= _QUICK_DEATHS_ALLOWED else 0


def _run_worker(run_worker: RunWorker, announce: Callable[[], None], parent: int) -> None:
    """In a forked worker: the stop signals back to their defaults (the worker's event loop
    installs its own), unblocked, then ``run_worker``; never returns."""
    code = 1
    try:
        for signum in _STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        _stop_with_parent(parent)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        run_worker(announce)
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
