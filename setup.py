"""Installs `bilm`: ELMo (the character-based biLM) for Keras 3: TensorFlow, JAX and PyTorch."""
import glob

from setuptools import find_packages, setup

BEAM = ["apache-beam>=2.77,<3"]
TENSORFLOW = ">=2.16"
# Keras 3's other backends. Without TensorFlow at all: pip install --no-deps bilm, then keras, numpy, h5py
# and one of these (docs/backends.md).
JAX = ["jax>=0.4.36"]
TORCH = ["torch>=2.4"]

setup(
    name="bilm",
    version="0.1.0",
    description="ELMo bidirectional language models for Keras 3 (TensorFlow, JAX, PyTorch): "
    "train, load the published weights, embed, and use inside Keras models.",
    packages=find_packages(include=["bilm", "bilm.*"]),
    # The C++ sources of bilm's own kernels, compiled at first use (bilm.ops.native).
    package_data={"bilm.ops.native": ["*.cc", "*.h"]},
    python_requires=">=3.9",
    install_requires=[
        f"tensorflow{TENSORFLOW}",
        "numpy",
        "h5py",
        # tf.summary.scalar, for the training curves (TensorFlow no longer brings it).
        "tensorboard",
    ],
    extras_require={
        # Apache Beam: bilm.beam's RunInference handler, transforms and pipeline (python -m bilm.beam).
        "beam": BEAM,
        # TensorFlow's CUDA libraries as pip packages (Linux): pip install "bilm[gpu]" trains and embeds on an
        # NVIDIA GPU without a system-wide CUDA. The scripts name the devices they use in their first line.
        "gpu": [f"tensorflow[and-cuda]{TENSORFLOW}"],
        # JAX and PyTorch beside TensorFlow: the same model on every Keras backend (KERAS_BACKEND=jax or torch).
        "jax": JAX,
        "torch": TORCH,
        # The tests cover bilm.beam and every backend too: the extra adds no constraint that TensorFlow's
        # requirements do not meet (protobuf<7 within TensorFlow's >=6.31.1,<8). PyTorch's CPU build, whose
        # 2.13.0 wheel this project's machines keep at hand (a newer release is a CUDA build of several GB).
        "test": ["pytest", "pytest-xdist", "ruff", *BEAM, "jax[cpu]>=0.4.36", "torch==2.13.0"],
    },
    # One command with a subcommand per script (bilm train, bilm embed, ...; python -m bilm too), and the
    # scripts of bin/ under bilm-tf's names.
    entry_points={"console_scripts": ["bilm = bilm.commands.cli:main"]},
    scripts=sorted(glob.glob("bin/*.py")),
)
