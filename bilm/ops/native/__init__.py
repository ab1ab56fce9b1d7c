"""bilm's own TensorFlow kernels: C++ sources compiled on this machine at first use.

`build_library` compiles one source into a shared library in a per-user
cache, keyed by everything that changes the binary; `load_lowbit_ops`
(`bilm.ops.native.lowbit_ops`) is the one caller today.
"""
from bilm.ops.native.build import BuildError, build_library, native_dir, source_path

__all__ = ["BuildError", "build_library", "native_dir", "source_path"]
