#!/usr/bin/env bash
# bilm's portable side on a GPU without TensorFlow (JAX and PyTorch only), in one prepared run sized to fit one
# 10-minute device call on an H100 or H200 (its figures are in docs/gpu.md): first the JAX training step on the GPU
# against the same step on the CPU and against itself (bench/bench_jax_step_on_device.py: float32 agrees, a seed
# repeats bit for bit), then its speed at the original and small sizes (bfloat16 with TF32, TF32, float32,
# deterministic or not; batch 128 x 20 and 512 x 20; the 1B Word Benchmark's 793,471 ids, 8192 negatives), PyTorch's
# at the small size, then ELMo's embedding on JAX and PyTorch against a float64 NumPy pass.
#
#   bash bench/bench_gpu_portable.sh --fetch_wheels    # here, with pip's registry: keras, optree, namex -> .whl/
#   bash bench/bench_gpu_portable.sh OUT_DIR           # there: installs .whl/ where Keras is missing, runs, logs
#   bash bench/bench_gpu_portable.sh OUT_DIR --quick   # the same sequence at the tiny size (2.6 min, 2-core CPU)
#
# OUT_DIR gets three files (a device machine returns few): benches.log (every bench's output, each under a
# "=== name: command" line), summary.txt (the lines that carry the figures and each bench's exit status) and
# the embedding bench's JSON. A bench that fails is reported and the others still run; the exit status is the
# number of failed benches (0: all ran). Ctrl-C or SIGTERM stops the bench in progress and the sequence
# (exit status 130 or 143).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PY_VERSION=3.12  # the GPU machines' Python

if [[ "${1:-}" == "--fetch_wheels" ]]; then
    set -e
    mkdir -p .whl
    versions=$("$PYTHON" -c 'import importlib.metadata as m; print(*(f"{n}=={m.version(n)}" for n in ("keras", "optree", "namex")))')
    # shellcheck disable=SC2086
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl $versions
    ls -l .whl
    exit 0
fi

out=${1:?usage: bench/bench_gpu_portable.sh OUT_DIR [--quick] | --fetch_wheels}
quick=${2:-}
if [[ -e "$out" && -n "$(ls -A "$out")" ]]; then
    echo "Error: $out is not empty; give a new or empty OUT_DIR (the benches write their logs there)." >&2
    exit 2
fi
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3
if ! "$PYTHON" -c 'import keras, optree, namex' 2> /dev/null && compgen -G ".whl/*.whl" > /dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/bilm_site \
        .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/bilm_site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

stopped=0 failed=0 child=
current=$(mktemp)  # the bench in progress's part of benches.log, outside OUT_DIR (it holds what comes back)
trap 'rm -f "$current"' EXIT
# A signal stops the bench in progress (its own SIGTERM handling: exit 143) and the benches after it. The
# benches run in the background, where a script's children ignore SIGINT, so SIGINT is passed on as SIGTERM.
trap 'stopped=130; [[ -n $child ]] && kill -TERM "$child" 2>/dev/null' INT
trap 'stopped=143; [[ -n $child ]] && kill -TERM "$child" 2>/dev/null' TERM
run() {  # run NAME ARGS...: one bench, its output shown and appended to $out/benches.log
    local name=$1 started=$SECONDS status from
    shift
    [[ $stopped != 0 ]] && return
    echo "=== $name: $*" | tee -a "$out/summary.txt" >> "$out/benches.log"
    from=$(($(stat -c %s "$out/benches.log") + 1))
    "$PYTHON" "$@" >> "$out/benches.log" 2>&1 &
    child=$!
    wait "$child"
    status=$?
    if kill -0 "$child" 2>/dev/null; then  # the wait was cut short by a signal: wait for the bench to stop
        wait "$child"
        status=$?
    fi
    child=
    tail -c "+$from" "$out/benches.log" > "$current"
    cat "$current"
    grep -E '^(jax|torch|backend|max \|dev|float32 matmuls|tokens/sec|compile time|peak memory|TFLOP/s|WARNING|PASS|FAIL)' \
        "$current" >> "$out/summary.txt"
    echo "=== $name: exit status $status after $((SECONDS - started)) s" | tee -a "$out/summary.txt" >> "$out/benches.log"
    tail -n 1 "$out/summary.txt"
    [[ $status != 0 ]] && failed=$((failed + 1))
    [[ $status == 130 || $status == 143 ]] && [[ $stopped == 0 ]] && stopped=$status
    return 0
}

"$PYTHON" -c 'import jax, numpy; print("jax", jax.__version__, jax.devices(), "numpy", numpy.__version__)' \
    2>&1 | tee "$out/summary.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee -a "$out/summary.txt"

train=(bench/bench_train.py --backend jax)
if [[ $quick == --quick ]]; then
    run step_check_tiny bench/bench_jax_step_on_device.py --quick
    tiny=(--size tiny --batch_size 4 --unroll_steps 5 --n_tokens_vocab 1003 --n_negative 64 --warmup 1 --steps 2)
    run train_tiny_bf16 "${train[@]}" "${tiny[@]}" --matmul_dtype bfloat16
    run train_tiny_tf32 "${train[@]}" "${tiny[@]}" --tf32
    run train_tiny_torch bench/bench_train.py --backend torch "${tiny[@]}" --tf32
    run embed_tiny bench/bench_backends.py --size tiny --backends jax,torch --batch_sizes 1,4 --sentences 4 \
        --length 5 --output "$out/embed_tiny.json" --overwrite
else
    # In order of what matters most, so that a run cut short by its time limit has measured the goal first
    # (bfloat16 matmuls at the original size, batch 128 x 20). bin/train_elmo.py keeps float32 matmuls in
    # float32 unless --tf32, and asks for deterministic GPU programs (--seed repeats a run): each is measured.
    original=(--size original --n_tokens_vocab 793471 --warmup 3 --steps 20)
    bf16=(--matmul_dtype bfloat16 --tf32)
    run step_check_small bench/bench_jax_step_on_device.py --size small  # first: a wrong step's speed is moot
    run train_original_bf16_tf32 "${train[@]}" "${original[@]}" "${bf16[@]}"
    run train_original_bf16_tf32_deterministic "${train[@]}" "${original[@]}" "${bf16[@]}" --deterministic
    run train_original_tf32 "${train[@]}" "${original[@]}" --tf32
    run train_original_bf16_tf32_b512 "${train[@]}" "${original[@]}" "${bf16[@]}" --batch_size 512
    run train_small_bf16_tf32 "${train[@]}" --size small --n_tokens_vocab 793471 --warmup 3 --steps 20 "${bf16[@]}"
    run train_original_float32 "${train[@]}" --size original --n_tokens_vocab 793471 --warmup 2 --steps 5
    # PyTorch's step (eager, the same array step) has not run on a GPU yet: the small size, its speed and memory.
    run train_small_torch_tf32 bench/bench_train.py --backend torch --size small --n_tokens_vocab 793471 \
        --warmup 2 --steps 10 --tf32
    run embed_original bench/bench_backends.py --size original --backends jax,torch --batch_sizes 1,32,512 \
        --output "$out/embed_original.json" --overwrite
fi
if [[ $stopped != 0 ]]; then
    echo "=== stopped by a signal; $failed bench(es) did not finish or failed" | tee -a "$out/summary.txt"
    exit "$stopped"
fi
echo "=== $failed bench(es) failed" | tee -a "$out/summary.txt"
exit "$failed"
