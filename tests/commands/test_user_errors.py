"""Every bin/ script ends bad input, and an output it cannot write, with one `Error:` line."""
import errno
import gc
import importlib.util
import json
import os
import signal
import sys
import time

import pytest

from bilm.commands.user_errors import exit_on_user_error
from helpers import ROOT, write_model, write_vocab
from training_helpers import tiny_options, write_corpus


def _main(script):
    spec = importlib.util.spec_from_file_location(f"bin_{script}", os.path.join(ROOT, "bin", f"{script}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_os_errors_become_one_line_naming_the_file():
    with pytest.raises(SystemExit) as stop:
        with exit_on_user_error():
            raise OSError(errno.EROFS, "Read-only file system", "/data/out.hdf5")
    assert stop.value.code == "Error: cannot use /data/out.hdf5: Read-only file system."
    with pytest.raises(SystemExit) as stop:
        with exit_on_user_error():
            raise OSError("[Errno 28] Unable to synchronously create file (name = 'out.hdf5', No space left)")
    assert stop.value.code.startswith("Error: [Errno 28] Unable to synchronously create file (name = 'out.hdf5'")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("files")
    options_file, weight_file, _ = write_model(tmp_path)
    corpus = write_corpus(tmp_path, n_train=40, n_heldout=10)
    training_options = tmp_path / "training_options.json"
    training_options.write_text(json.dumps(tiny_options()))
    blocked = tmp_path / "a_file.txt"  # outputs "inside" it cannot be written
    blocked.write_text("x")
    return {"options": options_file, "weights": weight_file, "vocab": write_vocab(tmp_path, ["The", "cat"]),
            "text": corpus["heldout"], "train": corpus["train"], "train_vocab": corpus["vocab"],
            "training_options": str(training_options), "blocked": str(blocked)}


@pytest.mark.parametrize("script, args", [
    ("elmo", ["{text}", "{blocked}/out.hdf5", "--options_file", "{options}", "--weight_file", "{weights}"]),
    ("dump_bilm_embeddings", ["--dataset_file", "{text}", "--options_file", "{options}", "--weight_file",
                              "{weights}", "--outfile", "{blocked}/out.hdf5"]),
    ("dump_token_embeddings", ["--vocab_file", "{vocab}", "--options_file", "{options}", "--weight_file",
                               "{weights}", "--outfile", "{blocked}/tokens.hdf5"]),
    ("build_vocab", ["--train_prefix", "{train}", "--vocab_file", "{blocked}/vocab.txt"]),
    ("train_elmo", ["--train_prefix", "{train}", "--vocab_file", "{train_vocab}", "--options_file",
                    "{training_options}", "--save_dir", "{blocked}/ckpt"]),
    ("restart", ["--train_prefix", "{train}", "--vocab_file", "{train_vocab}", "--save_dir", "{blocked}/ckpt"]),
    ("quickstart", ["--directory", "{blocked}/quickstart"]),
])
def test_an_output_that_cannot_be_written_is_one_error_line_before_any_work(files, script, args):
    with pytest.raises(SystemExit) as stop:
        _main(script)([arg.format(**files) for arg in args])
    message = str(stop.value.code)
    assert message.startswith("Error: ") and "\n" not in message and files["blocked"] in message
    if script == "restart":  # its save_dir must already hold the checkpoints it continues
        return
    assert f"{files['blocked']}: it is a file, not a directory" in message or (
        f"Cannot create the output directory {files['blocked']}/" in message and "Not a directory" in message)


def test_a_user_error_is_one_line_and_a_bug_keeps_its_traceback():
    from bilm.errors import UserError

    with pytest.raises(SystemExit) as stop:
        with exit_on_user_error():
            raise UserError("options.json: 'n_epochs' must be an integer >= 1, got 0.")
    assert stop.value.code == "Error: options.json: 'n_epochs' must be an integer >= 1, got 0."
    # TensorFlow and NumPy raise ValueError for shape bugs: those are not the user's.
    with pytest.raises(ValueError, match="Shapes .* are incompatible") as raised:
        with exit_on_user_error():
            raise ValueError("Shapes (2, 3) and (4,) are incompatible")
    assert not isinstance(raised.value, UserError)


@pytest.mark.slow
def test_a_bug_inside_a_script_prints_its_traceback(tmp_path):
    """A script run as the user runs it: an internal error shows the traceback, a user error one line."""
    import subprocess
    import sys

    options_file, weight_file, _ = write_model(tmp_path)
    text = tmp_path / "in.txt"
    text.write_text("a b\n")
    bug = ("import sys, runpy; import bilm.export.sentence_embeddings as m\n"
           "def broken(*a, **k): raise ValueError('Shapes (2, 3) and (4,) are incompatible')\n"
           "m.write_embeddings = broken\n"
           f"sys.argv = ['elmo.py', {str(text)!r}, {str(tmp_path / 'out.hdf5')!r}, '--options_file', "
           f"{options_file!r}, '--weight_file', {weight_file!r}]\n"
           f"runpy.run_path({os.path.join(ROOT, 'bin', 'elmo.py')!r}, run_name='__main__')\n")
    result = subprocess.run([sys.executable, "-c", bug], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr and "incompatible" in result.stderr
    assert not any(line.startswith("Error: ") for line in result.stderr.splitlines())
    user = subprocess.run([sys.executable, os.path.join(ROOT, "bin", "elmo.py"), str(text), str(tmp_path / "o.hdf5"),
                           "--options_file", options_file, "--weight_file", str(tmp_path / "missing.hdf5")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert user.returncode == 1 and "Traceback" not in user.stderr
    assert user.stderr.strip().splitlines()[-1].startswith("Error: Weight file not found")


def test_a_ctrl_c_that_a_garbage_collector_callback_swallowed_still_stops_the_command():
    """JAX runs Python code at every collection (a `gc` callback); a Ctrl-C landing there raised a
    KeyboardInterrupt that Python prints as "Exception ignored" and drops, and the command ran on to its end.
    Here the signal arrives inside such a callback, and the command still stops with status 130."""
    fired, hook = [], sys.unraisablehook

    def collector_callback(phase, info):
        if phase == "start" and not fired:
            fired.append(phase)
            signal.raise_signal(signal.SIGINT)  # its handler runs here, inside the callback

    with pytest.raises(SystemExit) as stopped:
        with exit_on_user_error():
            gc.callbacks.append(collector_callback)
            try:
                gc.collect()
            finally:
                gc.callbacks.remove(collector_callback)
            assert fired  # the signal's KeyboardInterrupt did not leave the callback
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # the work goes on, until the signal comes back
                time.sleep(0.001)
    assert stopped.value.code == 130
    assert sys.unraisablehook is hook  # the command's own hook is put back at its end
