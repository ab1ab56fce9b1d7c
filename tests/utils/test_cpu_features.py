"""has_bfloat16_arithmetic reads /proc/cpuinfo's flag line."""
import pytest

from bilm.utils import cpu_features


@pytest.mark.parametrize("line, expected", [
    ("flags\t\t: fpu sse2 avx2 fma f16c avx512f\n", False),          # AVX2 / AVX-512 without BF16
    ("flags\t\t: fpu avx2 avx512f avx512_bf16\n", True),              # AVX512-BF16
    ("flags\t\t: fpu avx2 amx_bf16 amx_tile\n", True),                # AMX
    ("Features\t: fp asimd sve bf16 i8mm\n", True),                   # ARM with BF16
    ("Features\t: fp asimd\n", False),
    ("arm64 arm", True),                                              # no /proc/cpuinfo: left to TensorFlow
])
def test_bfloat16_arithmetic_is_read_from_the_cpu_flags(line, expected, monkeypatch):
    monkeypatch.setattr(cpu_features, "cpu_flags", lambda: line)
    assert cpu_features.has_bfloat16_arithmetic.__wrapped__() is expected
