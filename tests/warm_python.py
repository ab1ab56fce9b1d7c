"""Python processes forked from a warm interpreter: `run` and `Popen` as `subprocess`'s, for the tests' scripts.

Most of a test's `python bin/train_elmo.py ...` or `python -c CODE` is the
import of Keras and its backend (TensorFlow, JAX or PyTorch), most of all on
a machine of few cores. Here a server per backend (and per import-time
environment) imports Keras once, then forks a process for each command.
The forked process is a real one: its own pid, exit status, signals,
standard streams, working directory, environment, `sys.argv` and
`sys.path[0]` as `python ...` gives them; it imports bilm itself, as a
command or as a library, as a new process does.

What differs from a new interpreter, and so where a test keeps `subprocess`:
- the imports of Keras and its backend happened before the command
  (a test of the start, of its signals or timing, or of what is imported);
- TensorFlow's load-time log lines went to the server, not the command;
- a warning already shown by the server's imports is not shown again;
- every process of one server shares its hash seed (a test that compares
  processes for order-dependence runs them with `subprocess`);
- at its end the command does what Python does (waits for its threads,
  runs `atexit`, flushes `sys.stdout` and `sys.stderr`, sets the same exit
  status) and then the C library's exit, without Python's teardown of the
  objects still alive (whose `__del__` Python does not promise to run at
  exit): that teardown takes seconds once Keras and its backend are
  imported.

A command this module cannot start as `python` would (interpreter flags,
`shell`, `preexec_fn`, ...) runs with `subprocess` unchanged, as every
command does where `WARM_PYTHON=0` is set (to compare the two).
"""
import atexit
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

# The environment read while Keras and its backend import: a server serves only processes that agree on it
# (`TF_CONFIG`, a cluster's, is read when a strategy is made, in the command).
IMPORT_TIME_PREFIXES = ("PYTHON", "TF_", "XLA_", "JAX_", "KERAS_", "OMP_", "MKL_", "CUDA_", "TORCH", "LC_", "LANG",
                        "LD_", "HOME", "TMPDIR")
RUN_TIME = ("TF_CONFIG",)

# The server: `sys.argv[1]` is its socket's path, `sys.argv[2:]` the modules it imports. It ends when its
# standard input closes (the test process ended). For each connection it receives a request (a length, then
# JSON: args, cwd, env, start_new_session) with the command's three standard streams, forks, sends the
# command's pid, and later its wait status. The forked process leaves the loop and runs the command below it.
SERVER = r'''
import gc, importlib, json, os, select, socket, sys
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(64)
gc.disable()  # during the imports, as a command's start does (bilm.utils.start_up)
for name in sys.argv[2:]:
    importlib.import_module(name)
gc.freeze()  # the imports' objects, out of every command's cyclic collections (and their pages unwritten)
gc.enable()
waiting, request = {}, None
while request is None:
    readable = select.select([listener, sys.stdin], [], [], 0.02)[0]
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        connection = waiting.pop(pid, None)
        if connection is not None:
            try:
                connection.sendall(f"{status}\n".encode())
            except OSError:
                pass
            connection.close()
    if sys.stdin in readable:
        sys.stdout.flush()
        os._exit(0)  # without the teardown of Keras and its backend (seconds)
    if listener in readable:
        connection = listener.accept()[0]
        header, fds, _, _ = socket.recv_fds(connection, 8, 3)
        size, payload = int.from_bytes(header, "big"), b""
        while len(payload) < size:
            payload += connection.recv(size - len(payload))
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            listener.close()
            connection.close()
            for other in waiting.values():
                other.close()
            request = json.loads(payload)
            break
        for fd in fds:
            os.close(fd)
        connection.sendall(f"{pid}\n".encode())
        waiting[pid] = connection
del listener, waiting
for target, fd in enumerate(fds):
    os.dup2(fd, target)
for fd in set(fds) - {0, 1, 2}:
    os.close(fd)
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
if request["start_new_session"]:
    os.setsid()
import builtins, types
args = request["args"]
sys.orig_argv = [sys.executable, *args]
main = types.ModuleType("__main__")
main.__builtins__ = builtins
import atexit, ctypes, signal, threading
status, interrupted = 0, False
try:
    if args[0] == "-m":
        import runpy
        sys.argv = ["-m", *args[2:]]
        sys.path[0] = os.getcwd()
        del main, request, args
        runpy._run_module_as_main(sys.orig_argv[2], alter_argv=True)
    else:
        if args[0] == "-c":
            sys.argv, sys.path[0] = ["-c", *args[2:]], ""
            code = compile(args[1], "<string>", "exec")
        else:
            import importlib.machinery, io
            sys.argv, sys.path[0] = args, os.path.dirname(os.path.realpath(args[0]))
            main.__file__, main.__cached__ = os.path.abspath(args[0]), None
            main.__loader__ = importlib.machinery.SourceFileLoader("__main__", main.__file__)
            with io.open_code(main.__file__) as f:
                code = compile(f.read(), args[0], "exec")
        sys.modules["__main__"] = main
        del request, args
        exec(code, main.__dict__)
except SystemExit as exit:
    if exit.code is None or isinstance(exit.code, int):
        status = exit.code or 0
    else:
        print(exit.code, file=sys.stderr)
        status = 1
except BaseException as error:
    sys.excepthook(type(error), error, error.__traceback__)
    status, interrupted = 1, isinstance(error, KeyboardInterrupt)
# Python's exit up to the teardown of its objects (waiting for threads, `atexit`, the streams' buffers), then the C
# library's exit (its handlers: HDF5's closes open files): the teardown of Keras and its backend takes seconds.
threading._shutdown()
atexit._run_exitfuncs()
for stream in (sys.stdout, sys.stderr):
    try:
        stream.flush()
    except Exception:
        status = status or 120
if interrupted:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
ctypes.CDLL(None).exit(status & 0xFF)  # the byte the system keeps of any status, as a C int
'''

class _Server:
    """One warm server: its process, its socket's path."""

    def __init__(self, environment, modules):
        self.folder = tempfile.mkdtemp(prefix="bilm-warm-python-")
        self.path = os.path.join(self.folder, "socket")
        self.log = open(os.path.join(self.folder, "server.log"), "w+")
        self.process = subprocess.Popen([sys.executable, "-c", SERVER, self.path, *modules], stdin=subprocess.PIPE,
                                        stdout=self.log, stderr=subprocess.STDOUT, env=environment,
                                        cwd=self.folder)

    def connect(self):
        """A connection to the server, once it listens (it binds its socket before its imports)."""
        while True:
            if self.process.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"the warm Python server ended ({self.process.returncode}):\n{self.log.read()}")
            client = socket.socket(socket.AF_UNIX)
            try:
                client.connect(self.path)
                return client
            except (FileNotFoundError, ConnectionRefusedError):
                client.close()
                time.sleep(0.02)

    def close(self):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


_SERVERS = {}
_MOST_SERVERS = 4


def _server(environment):
    """The server for `environment`'s import-time variables, started on first use (the least recently used of
    more than `_MOST_SERVERS` is ended)."""
    key = tuple(sorted((name, value) for name, value in environment.items()
                       if name.startswith(IMPORT_TIME_PREFIXES) and name not in RUN_TIME))
    server = _SERVERS.pop(key, None)
    if server is None:
        modules = ["numpy", "h5py", "keras"]
        server = _Server({name: value for name, value in environment.items() if name in dict(key)}
                         | {"PATH": environment.get("PATH", os.defpath)}, modules)
        if len(_SERVERS) >= _MOST_SERVERS:
            _SERVERS.pop(next(iter(_SERVERS))).close()
    _SERVERS[key] = server  # the most recently used last
    return server


@atexit.register
def close_servers():
    """Ends every server and removes its folder (at exit; and at a pytest-xdist worker's end, which skips
    `atexit`: tests/conftest.py)."""
    while _SERVERS:
        _SERVERS.popitem()[1].close()


# `subprocess.Popen`'s arguments this module passes on, with their defaults: any other value runs `subprocess`.
_DEFAULTS = {"shell": False, "preexec_fn": None, "pass_fds": (), "executable": None, "user": None, "group": None,
             "extra_groups": None, "umask": -1, "process_group": None, "startupinfo": None, "creationflags": 0,
             "restore_signals": True}


def _warm_args(args, kwargs):
    """The arguments after the interpreter where `args` and `kwargs` start a Python command this module can
    start (`python SCRIPT ...`, `python -c CODE ...`, `python -m MODULE ...`), else None."""
    if os.environ.get("WARM_PYTHON") == "0":
        return None
    if isinstance(args, (str, bytes)) or not args or os.fspath(args[0]) != sys.executable:
        return None
    if any(kwargs[name] != default for name, default in _DEFAULTS.items() if name in kwargs):
        return None
    rest = [os.fspath(arg) for arg in args[1:]]
    if not rest or (rest[0].startswith("-") and (rest[0] not in ("-c", "-m") or len(rest) < 2)):
        return None
    return rest


class Popen(subprocess.Popen):
    """`subprocess.Popen`, forked from a warm server where the command is one `python` would run as given
    (see the module's docstring); otherwise `subprocess.Popen` itself."""

    def __init__(self, args, **kwargs):
        self._warm = _warm_args(args, kwargs)
        self._status = None
        super().__init__(args, **kwargs)

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                       creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                       restore_signals, gid, gids, uid, umask, start_new_session, *rest):
        if self._warm is None:
            return super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                                          startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread,
                                          c2pwrite, errread, errwrite, restore_signals, gid, gids, uid, umask,
                                          start_new_session, *rest)
        environment = dict(os.environ if env is None else {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()})
        streams = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
                   errwrite if errwrite != -1 else 2]
        request = json.dumps({"args": self._warm, "cwd": os.path.abspath(os.fspath(cwd) if cwd else os.getcwd()),
                              "env": environment, "start_new_session": bool(start_new_session)}).encode()
        self._connection = _server(environment).connect()
        socket.send_fds(self._connection, [len(request).to_bytes(8, "big")], streams)
        self._connection.sendall(request)
        self._buffer = b""
        line = self._read_line(block=True)
        if not line:
            raise RuntimeError(f"the warm Python server did not start {shlex.join(map(str, args))}")
        self.pid = int(line)
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _read_line(self, block):
        """The server's next line (without its newline); None where `block` is false and none came yet; b"" where
        the server closed the connection first."""
        while b"\n" not in self._buffer:
            self._connection.setblocking(block)
            try:
                data = self._connection.recv(64)
            except BlockingIOError:
                return None
            if not data:
                return b""
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _try_wait(self, wait_flags):
        if self._warm is None:
            return super()._try_wait(wait_flags)
        if self._status is None:
            line = self._read_line(block=not wait_flags & os.WNOHANG)
            if line is None:
                return 0, 0
            if not line:
                raise RuntimeError("the warm Python server ended before its command")
            self._status = int(line)
            self._connection.close()
        return self.pid, self._status

    def _internal_poll(self, _deadstate=None, **_):
        if self._warm is None:
            return super()._internal_poll(_deadstate=_deadstate)
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    pid, status = self._try_wait(os.WNOHANG)
                    if pid == self.pid:
                        self._handle_exitstatus(status)
            finally:
                self._waitpid_lock.release()
        return self.returncode


def run(*popenargs, input=None, capture_output=False, timeout=None, check=False, **kwargs):
    """`subprocess.run`, with `Popen` above."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with Popen(*popenargs, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as expired:
            process.kill()
            process.wait()
            raise subprocess.TimeoutExpired(process.args, timeout, output=expired.output,
                                            stderr=expired.stderr) from None
        except BaseException:
            process.kill()
            raise
        status = process.poll()
        if check and status:
            raise subprocess.CalledProcessError(status, process.args, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(process.args, status, stdout, stderr)
