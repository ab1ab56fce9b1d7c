"""bilm's own CPU kernels: C++ sources compiled on this machine at first use.

`build.compile_cached` compiles one source into a shared library in a
per-user cache, keyed by everything that changes the binary;
`build_library` is it with TensorFlow's flags. The libraries:
TensorFlow's ops (`load_lowbit_ops`, `bilm.ops.native.lowbit_ops`), and
their recurrence and product for the other backends, on NumPy arrays
(`load_library`, `bilm.ops.native.portable_kernels`).
"""
from bilm.ops.native.build import BuildError, build_library, native_dir, source_path

__all__ = ["BuildError", "build_library", "native_dir", "source_path"]
