"""What this machine's CPU can do, as /proc/cpuinfo names it."""
import functools
import platform

# Instruction sets that multiply bfloat16 in hardware (x86's AVX512-BF16
# and AMX, ARM's BF16), as /proc/cpuinfo lists them.
BFLOAT16_ARITHMETIC_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_flags():
    """The first `flags` (x86) or `Features` (ARM) line of /proc/cpuinfo; the platform's names elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()}"


@functools.cache
def has_bfloat16_arithmetic():
    """Whether the CPU multiplies bfloat16 in hardware. True where
    /proc/cpuinfo cannot tell (another system): bfloat16 products are then
    left to TensorFlow, as on such hardware."""
    line = cpu_flags()
    if not line.startswith(("flags", "Features")):
        return True
    return bool(BFLOAT16_ARITHMETIC_FLAGS & set(line.split(":", 1)[-1].split()))
