"""Compiling a C++ source into a library (a TensorFlow op library, or the portable one), once per machine,
framework and source.

The cache directory (`native_dir()`) holds, for each build:
- `<stem>-<key>.so`, the library, compiled under a temporary name and
  renamed into place, so that its name never holds a partial file;
- `<stem>-<key>.so.sha256`, the library's digest, written after the
  rename: a library without a matching digest (a crash between the two,
  a damaged file) is rebuilt;
- `<stem>-<key>.lock`, locked while one process checks or builds, so
  that processes starting together (pytest-xdist workers) build once and
  all use that build;
- `<stem>-<key>.log`, the compiler's output of a failed build. While it
  is there the build is not tried again (every process would spend the
  compiler's time only to fail the same way); removing it retries.
`key` hashes the source and the headers it includes from its folder, the
framework's version (TensorFlow's), the compile and link flags, the
compiler and its version, and the CPU's feature flags (the library is
built with `-march=native`): a change of any of them builds a new library
beside the old ones.
"""
import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

from bilm.errors import UserError
from bilm.utils.cpu_features import cpu_flags

NATIVE_DIR_ENVIRONMENT_VARIABLE = "BILM_NATIVE_DIR"
# The conventional variable naming the C++ compiler; the system's g++ without it.
COMPILER_ENVIRONMENT_VARIABLE = "CXX"
DEFAULT_COMPILER = "g++"
BUILD_FLAGS = ("-O3", "-march=native", "-fPIC", "-shared",
               # TensorFlow's headers set these off by the hundred; a failed build's log is easier to read without.
               "-Wno-deprecated-declarations", "-Wno-interference-size")
BUILD_TIMEOUT_SECONDS = 600
# Instruction sets `-march=native` may turn on that TensorFlow's headers cannot
# compile with, each as (the macro the compiler then defines, the flag that
# turns it off again). Eigen's AVX512-FP16 code fails in GCC 12 (Sapphire
# Rapids and later); bilm's kernels use no float16 arithmetic.
HEADER_BREAKING_FEATURES = (("__AVX512FP16__", "-mno-avx512fp16"),)


class BuildError(UserError):
    """A library could not be built: no compiler (install g++ or set `$CXX`), or the compiler failed. The
    message is one line."""


def native_dir():
    """`$BILM_NATIVE_DIR` if set, else `$XDG_CACHE_HOME/bilm/native`, else `~/.cache/bilm/native`."""
    if os.environ.get(NATIVE_DIR_ENVIRONMENT_VARIABLE):
        return os.environ[NATIVE_DIR_ENVIRONMENT_VARIABLE]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "bilm", "native")


def source_path(name):
    """The path of the C++ source `name` shipped in this folder."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


def build_library(source, cache_dir=None, compiler=None):
    """The path of the TensorFlow op library built from the C++ file `source`, built now or found in the cache.

    Args:
        source: path of a C++ file using TensorFlow's headers.
        cache_dir: where libraries are kept (default `native_dir()`).
        compiler: the C++ compiler's command (default `$CXX`, else `g++`).

    Returns:
        the absolute path of the library, complete and matching its digest.

    Raises:
        BuildError: no such compiler, or it failed or timed out (the
            message names the first error; the log file has all of it).
    """
    # Imported here, not at the top: `compile_cached` runs (and is tested) in processes without TensorFlow.
    import tensorflow as tf

    return compile_cached(source, [*BUILD_FLAGS, *tf.sysconfig.get_compile_flags()], tf.sysconfig.get_link_flags(),
                          cache_dir, compiler, identity=f"tensorflow {tf.__version__}")


def warn_not_built(what, instead, error, stacklevel):
    """One RuntimeWarning: bilm could not build its `what` (the first line of `error`, or its type's name), and
    `instead` runs. `stacklevel` counts from the caller, as `warnings.warn`'s does."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    warnings.warn(f"bilm could not build its {what} ({message}); {instead}.", RuntimeWarning,
                  stacklevel=stacklevel + 1)


def compile_cached(source, compile_flags, link_flags, cache_dir=None, compiler=None, identity=""):
    """`build_library` with explicit flags: `compiler *compile_flags source -o library *link_flags`, once.

    `identity` names what else the library depends on (a version); it is
    part of the cache key with the source, the flags, the compiler and the
    CPU's flags.
    """
    compiler = compiler or os.environ.get(COMPILER_ENVIRONMENT_VARIABLE) or DEFAULT_COMPILER
    executable = shutil.which(compiler)
    if executable is None:
        raise BuildError(f"no C++ compiler: {compiler!r} is not on PATH")
    if "-march=native" in compile_flags:
        compile_flags = [*compile_flags, *_header_breaking_features_off(executable)]
    text = _source_text(source)
    key = hashlib.sha256(b"\0".join(part.encode() if isinstance(part, str) else part for part in (
        text, identity, " ".join(compile_flags), " ".join(link_flags), executable,
        _compiler_version(executable), cpu_flags()))).hexdigest()[:16]
    directory = os.path.abspath(os.path.expanduser(cache_dir or native_dir()))
    os.makedirs(directory, exist_ok=True)
    name = os.path.join(directory, f"{os.path.splitext(os.path.basename(source))[0]}-{key}")
    library = name + ".so"
    with _exclusive(name + ".lock"):
        if _intact(library):
            return library
        if os.path.exists(name + ".log"):
            raise BuildError(f"{executable} failed on {os.path.abspath(source)} before, with this CPU and "
                             f"these flags: {_first_error(name + '.log')} (whole output in {name}.log; remove "
                             "it to try again)")
        # The one wait a user would otherwise not understand.
        print(f"bilm: building {os.path.basename(source)} for this CPU{' and ' + identity if identity else ''}, "
              f"once (cached in {directory}); this takes up to half a minute.", file=sys.stderr, flush=True)
        _compile([executable, *compile_flags, os.path.abspath(source)], link_flags, library, name + ".log")
    return library


def _source_text(source):
    """The bytes of `source` and of each header it includes by a quoted name from its own folder (bilm's
    headers, `#include "name.h"`), so that a change of either builds anew."""
    with open(source, "rb") as f:
        text = f.read()
    folder = os.path.dirname(os.path.abspath(source))
    for name in re.findall(rb'^#include "([^"/]+)"', text, flags=re.MULTILINE):
        path = os.path.join(folder, name.decode())
        if os.path.exists(path):
            with open(path, "rb") as f:
                text += b"\0" + f.read()
    return text


def _compile(command, link_flags, library, log):
    fd, partial = tempfile.mkstemp(prefix=os.path.basename(library) + ".", suffix=".partial",
                                   dir=os.path.dirname(library))
    os.close(fd)
    try:
        try:
            result = subprocess.run([*command, "-o", partial, *link_flags], capture_output=True, text=True,
                                    timeout=BUILD_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise BuildError(f"{command[0]} did not finish building {command[-1]} "
                             f"in {BUILD_TIMEOUT_SECONDS} s") from None
        if result.returncode != 0:
            with open(log, "w") as f:
                f.write(" ".join(command) + "\n" + result.stdout + result.stderr)
            raise BuildError(f"{command[0]} failed (exit {result.returncode}) on {command[-1]}: "
                             f"{_first_error(log)} (whole output in {log})")
        digest = _digest(partial)
        os.replace(partial, library)
        _write_atomically(library + ".sha256", digest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)


def _first_error(log):
    with open(log) as f:
        # The first line is the command.
        lines = f.read().splitlines()[1:]
    return next((line.strip() for line in lines if "error" in line), "(no message)")


def _header_breaking_features_off(executable):
    """The flags turning off what `HEADER_BREAKING_FEATURES` names, for those `executable -march=native` turns on.

    The compiler is asked only on a CPU that has any of them (/proc/cpuinfo
    names AVX512-FP16 `avx512_fp16`), so elsewhere this costs nothing.
    """
    if "avx512_fp16" not in cpu_flags().split():
        return []
    try:
        macros = subprocess.run([executable, "-march=native", "-dM", "-E", "-x", "c++", os.devnull],
                                capture_output=True, text=True, timeout=60).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return []
    return [flag for macro, flag in HEADER_BREAKING_FEATURES if macro in macros]


def _intact(library):
    try:
        with open(library + ".sha256") as f:
            expected = f.read().strip()
        return _digest(library) == expected
    except FileNotFoundError:
        return False


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _write_atomically(path, text):
    fd, partial = tempfile.mkstemp(prefix=os.path.basename(path) + ".", dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(partial, path)


@contextlib.contextmanager
def _exclusive(lock_path):
    try:
        import fcntl
    except ImportError:  # Not POSIX: the renames alone keep each file whole; two processes may both build.
        yield
        return
    with open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _compiler_version(executable):
    try:
        return subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
