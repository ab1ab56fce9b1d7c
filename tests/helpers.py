"""Small shared helpers for the tests: paths, tiny model directories on disk, zips of model files."""
import io
import json
import os
import subprocess
import sys
import zipfile

import numpy_reference as R
import warm_python

# The tests folder and the repository root (scripts run from there).
TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)

SENTENCES = [
    ["The", "cat", "sat", "."],
    ["Hi"],
    [],
    ["naïve", "中文", "tokenlongerthanthelimit", "🙂", "x"],
    ["a", "b", "a", "b", "a", "b", "a"],
]


# Python source for a process (`backend_processes.run_on_backend`): one LSTM layer's arrays of `batch` rows (set
# before it; NumPy imported as np), drawn from seed 0: inputs `(batch, 6, 5)`, both states (7 units, 4 outputs) and
# the input, recurrent, bias and projection kernels.
LSTM_ARRAYS = """
rng = np.random.default_rng(0)
time, dim, units, out = 6, 5, 7, 4
inputs = rng.normal(size=(batch, time, dim)).astype(np.float32)
c0, h0 = rng.normal(size=(batch, units)).astype(np.float32), rng.normal(size=(batch, out)).astype(np.float32)
kernels = [rng.normal(size=shape).astype(np.float32) * 0.5
           for shape in ((dim, 4 * units), (out, 4 * units), (4 * units,), (units, out))]


def layer_arrays(projection):
    # A layer's kernels and start h: `kernels` and `h0` with a projection, else new ones `units` wide.
    if projection:
        return kernels, h0
    own = [kernels[0][:, :4 * units], rng.normal(size=(units, 4 * units)).astype(np.float32) * 0.5, kernels[2], None]
    return own, rng.normal(size=(batch, units)).astype(np.float32)
"""


def write_model(tmp_path, seed=0, **option_kwargs):
    """Writes `options.json` and random `weights.hdf5`; returns (options, weights, options_dict)."""
    options = R.make_options(**option_kwargs)
    options_file = tmp_path / "options.json"
    options_file.write_text(json.dumps(options))
    weight_file = tmp_path / "weights.hdf5"
    R.write_random_weights(str(weight_file), options, seed=seed)
    return str(options_file), str(weight_file), options


def write_lines(tmp_path, lines, name="vocab.txt"):
    """Writes `lines` (one per line, UTF-8) to `tmp_path / name`; returns the path."""
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def write_vocab(tmp_path, tokens, name="vocab.txt"):
    """A vocabulary file: `<S>`, `</S>`, `<UNK>`, then `tokens`."""
    return write_lines(tmp_path, ["<S>", "</S>", "<UNK>", *tokens], name)


def write_shard(tmp_path, name, lines):
    """A training shard: `lines` (one sentence each) in `tmp_path / name`; returns the path."""
    return write_lines(tmp_path, lines, name)


def zip_bytes(members):
    """A zip of `{name: bytes}`, as bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


# A zip as the NLPL repository publishes a model: one top folder with the options, the weights, the
# vocabulary and meta.json.
NLPL_ZIP = zip_bytes({"elmo/options.json": b"{}", "elmo/model.hdf5": b"x", "elmo/vocab.txt": b"the\n",
                      "elmo/meta.json": b'{"corpus": "Wikipedia", "id": 222}'})


def graph_op_types(graph):
    """The op types of a `tf.Graph`, its functions' (loop bodies, branches) included."""
    types = {op.type for op in graph.get_operations()}
    for definition in graph.as_graph_def().library.function:
        types |= {node.op for node in definition.node_def}
    return types


def ready_process(code, *args):
    """A Python process running `code` (with `sys.argv[1:] == args`) that prints "ready" once it holds what a
    test waits for (a lock, a file open); returned when it has. The caller ends it (its stdin, then wait)."""
    child = warm_python.Popen([sys.executable, "-c", code, *map(str, args)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    if child.stdout.readline().strip() != "ready":
        child.kill()
        raise AssertionError(f"the process failed before it was ready (status {child.wait()})")
    return child
