"""SIGINT and SIGTERM stop a pipeline that runs on this machine at once, with every worker process it started.

Beam's local runner, left alone, does not stop cleanly: Ctrl-C reaches the
driver and its `multi_processing` workers together (one process group),
each worker's main thread gets a `KeyboardInterrupt` while its work goes on
in other threads, and the driver then waits in Beam's teardown
(`WorkerHandlerManager.close_all`) for workers that never exit; a SIGTERM
kills the driver alone and leaves its workers running. Here:

- `stop_on_signals` is the driver's side: on SIGINT or SIGTERM (any phase:
  starting workers, loading the model, embedding, writing) it kills every
  process the driver started, waits until they are gone, removes what they
  were writing (the caller's `cleanup`, and their scratch directories),
  prints `Stopped by SIGINT.` (or SIGTERM) and exits with 130 (or 143),
  without waiting on Beam's teardown. The signal's handler does it, or a
  watcher thread woken through `signal.set_wakeup_fd` while the main
  thread is busy in TensorFlow or HDF5, whichever comes first.
- `LocalRunner` is Beam's `FnApiRunner` whose `multi_processing` workers
  leave the signals to the driver: each starts a session of its own (a
  terminal's Ctrl-C and a signal to the driver's process group do not reach
  it; signals are ignored until then) and, on Linux, is killed when the
  driver dies, even by SIGKILL.
"""
import contextlib
import glob
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from apache_beam.portability import python_urns
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# How long the stop waits for the killed processes to be gone.
KILL_TIMEOUT_S = 5.0
# A process's scratch directory (`scratch_directory`): removed when the driver kills that process.
SCRATCH_PREFIX = "bilm-beam-"

# What a worker runs before Beam's worker: a session of its own (out of reach of the signals sent to the
# driver's terminal or process group), the usual signal handlers back, death with its parent (Linux), and an exit
# if the driver is gone already. `{driver}` is the driver's PID.
WORKER_START = """\
import os, signal, sys
os.setsid()
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
if sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
if os.getppid() != {driver}:
    sys.exit(0)
"""
_WORKER_MAIN = WORKER_START + """\
from apache_beam.runners.worker import sdk_worker_main
sdk_worker_main.main(sys.argv)
"""


def beam_worker_command():
    """The shell command of Beam's own `multi_processing` worker (see `FnApiRunner.run_pipeline`)."""
    return f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"


def worker_command():
    """The shell command of a `LocalRunner` worker: SIGINT and SIGTERM ignored until it has a session of its own."""
    code = _WORKER_MAIN.format(driver=os.getpid())
    return f"trap '' INT TERM; exec {shlex.quote(sys.executable)} -c {shlex.quote(code)}"


class LocalRunner(FnApiRunner):
    """Beam's `FnApiRunner` (in memory, or `--direct_running_mode multi_processing`) whose worker processes leave
    SIGINT and SIGTERM to the driver and die with it (see the module docstring); use it inside `stop_on_signals`."""

    def run_via_runner_api(self, pipeline_proto, options):
        if os.name == "posix":
            for environment in pipeline_proto.components.environments.values():
                if (environment.urn == python_urns.SUBPROCESS_SDK
                        and environment.payload.decode("utf-8") == beam_worker_command()):
                    environment.payload = worker_command().encode("utf-8")
        return super().run_via_runner_api(pipeline_proto, options)


def scratch_directory():
    """A new local directory for this process's temporary files; the driver removes it if it kills the process."""
    return tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")


@contextlib.contextmanager
def stop_on_signals(cleanup=None):
    """While the block runs, SIGINT and SIGTERM end this process and every process it started, at once.

    On the first of them: no new worker is started (Beam's lock around
    starting one is held), every descendant process is killed (SIGKILL) and
    awaited, `cleanup()` removes what they were writing, and their scratch
    directories go; then only `Stopped by SIGINT.` (or SIGTERM) is written
    to stderr, whatever Beam's threads would say about their lost workers,
    and the process exits with 128 + the signal's number. The main thread
    does it as the signal's handler, or a watcher thread (woken through
    `signal.set_wakeup_fd`) while the main thread is busy in a call that
    does not return to Python. A signal that comes as the block ends goes
    to the handler from before it. Outside the main thread, or where signals
    are not POSIX's, the block runs as it is.

    Args:
        cleanup: a function run once the processes are gone, or None.
    """
    if os.name != "posix" or threading.current_thread() is not threading.main_thread():
        yield
        return
    stop = _SignalStop(cleanup)
    try:
        yield
    finally:
        stop.close()


class _SignalStop:
    """The state of `stop_on_signals`. `closed` until its handlers are in place and again once the block ended: a
    signal then goes to the handler from before. `stopping` once a thread took the stop; never both (`take`)."""

    def __init__(self, cleanup):
        self.cleanup = cleanup
        self.stopping, self.closed = False, True
        self.lock = threading.RLock()  # the main thread's handler may run while the main thread holds it
        self.receiver, self.sender = socket.socketpair()
        self.sender.setblocking(False)
        self.watcher = threading.Thread(target=self._watch, name="bilm-stop-on-signals", daemon=True)
        self.watcher.start()
        self.previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
        self.previous_wakeup = None
        try:
            self.previous_wakeup = signal.set_wakeup_fd(self.sender.fileno())
            for signum in STOP_SIGNALS:
                signal.signal(signum, self._handle)
        except BaseException:  # a signal as it starts: the handler from before raised
            self._restore()
            raise
        with self.lock:
            self.closed = False

    def take(self):
        """`"stop"` for the first thread to ask while the block runs, `"wait"` while another one stops the process,
        `"closed"` before and after the block."""
        with self.lock:
            if self.closed:
                return "closed"
            if self.stopping:
                return "wait"
            self.stopping = True
            return "stop"

    def close(self):
        with self.lock:
            self.closed = not self.stopping
        if not self.closed:
            _wait_for_exit()
        self._restore()

    def _restore(self):
        for signum, handler in self.previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        if self.previous_wakeup is not None:
            signal.set_wakeup_fd(self.previous_wakeup)
        self.sender.send(b"\0")  # no signal has number 0: the watcher ends
        self.watcher.join()
        self.receiver.close()
        self.sender.close()

    def _handle(self, signum, frame):
        taken = self.take()
        if taken == "stop":
            _stop(signal.Signals(signum), self.cleanup)
        elif taken == "wait":
            _wait_for_exit()
        else:
            previous = self.previous[signum]
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

    def _watch(self):
        while True:
            for signum in self.receiver.recv(64):
                if signum == 0:
                    return
                if signum in STOP_SIGNALS and self.take() == "stop":
                    _stop(signal.Signals(signum), self.cleanup)


def _wait_for_exit():
    """Waits for the thread that stops the process to end it."""
    while True:
        time.sleep(60)


def _stop(signum, cleanup):
    """Kills the descendants, cleans up, says why in one line and exits (never returns)."""
    stderr = os.dup(2)
    with open(os.devnull, "wb") as devnull:  # Beam's threads complain about their lost workers: not the user's concern
        os.dup2(devnull.fileno(), 2)
    try:
        with _no_new_workers():
            killed = kill_descendants()
            if cleanup is not None:
                cleanup()
            for pid in (os.getpid(), *killed):
                for path in glob.glob(os.path.join(tempfile.gettempdir(), f"{SCRATCH_PREFIX}{pid}-*")):
                    shutil.rmtree(path, ignore_errors=True)
    finally:
        os.write(stderr, f"\nStopped by {signum.name}.\n".encode())
        os._exit(128 + int(signum))


@contextlib.contextmanager
def _no_new_workers():
    """Holds the lock that Beam's local runner takes to start a worker process (if this Beam has it)."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    lock = getattr(worker_handlers, "SUBPROCESS_LOCK", None)
    acquired = lock is not None and lock.acquire(timeout=KILL_TIMEOUT_S)
    try:
        yield
    finally:
        if acquired:
            lock.release()


def kill_descendants(timeout=KILL_TIMEOUT_S):
    """Kills (SIGKILL) every descendant of this process, until none is left or `timeout` seconds passed; returns
    their PIDs."""
    killed = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [pid for pid, state in descendants(os.getpid()).items() if state != "Z"]
        if not alive:
            break
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.02)
    return sorted(killed)


def descendants(pid):
    """`{PID: state}` of the descendants of process `pid` (`"Z"`: a zombie, dead)."""
    table = _process_table()
    found, parents = {}, [pid]
    while parents:
        parent = parents.pop()
        for child, (ppid, state) in table.items():
            if ppid == parent and child not in found:
                found[child] = state
                parents.append(child)
    return found


def _process_table():
    """`{PID: (parent PID, state)}` of this machine's processes: from /proc, else from `ps`."""
    table = {}
    if os.path.isdir("/proc"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                    stat = f.read()
            except OSError:  # ended meanwhile
                continue
            state, ppid = stat[stat.rindex(")") + 2:].split()[:2]  # "pid (name) state ppid ..."
            table[int(entry)] = (int(ppid), state)
        return table
    listing = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,stat="], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        pid, ppid, state = line.split()[:3]
        table[int(pid)] = (int(ppid), state[:1])
    return table
