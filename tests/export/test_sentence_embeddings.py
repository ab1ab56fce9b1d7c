"""embed_file, bin/elmo.py and dump_bilm_embeddings: layouts and values, sentence keys, resume, safety, bad input."""
import json
import os
import runpy
import subprocess
import sys

import h5py
import numpy as np
import pytest

import numpy_reference as R
import warm_python
from bilm.export import sentence_datasets  # where embed_file loads its model class
from bilm.export.sentence_embeddings import dump_bilm_embeddings, embed_file, embeddings_stamp, sentence_key
from bilm.io.formats.embedding_files import changed_attributes, read_root_attributes
from bilm.io.formats.output_files import OutputFileError, OutputLockedError
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.pretrained import ELMo
from helpers import ROOT, SENTENCES, write_model, write_vocab

# SENTENCES, with the empty one written as a whitespace-only line.
LINES = [" ".join(s) if s else " \t " for s in SENTENCES]
# Widths that are multiples of 16 (as every published model's): an elementwise op's vector code then
# covers every value, while a width such as 6 leaves some values of some batches to its scalar code,
# which rounds differently.
WHOLE_VECTORS = {"lstm_dim": 16, "projection_dim": 16, "filters": ((1, 4), (2, 5), (3, 7))}


def _input_file(tmp_path, lines, name="in.txt"):
    path = tmp_path / name
    path.write_bytes(b"".join((line.encode("utf-8") if isinstance(line, str) else line) + b"\n"
                              for line in lines))
    return str(path)


def _read(path):
    """({dataset name: array}, sentence_to_index dict, root attributes)."""
    with h5py.File(path, "r") as f:
        arrays = {key: f[key][...] for key in f if key != "sentence_to_index"}
        mapping = json.loads(f["sentence_to_index"][0])
        return arrays, mapping, dict(f.attrs)


@pytest.mark.parametrize("output_format", ["all", "top", "average"])
def test_formats_match_the_stateless_model(tmp_path, model, stateless_layers, output_format):
    options_file, weight_file, options = model
    outfile = str(tmp_path / "out.hdf5")
    written = embed_file(_input_file(tmp_path, LINES), outfile, options_file, weight_file,
                         output_format=output_format, batch_size=2, verbose=0)
    assert written == len(SENTENCES)
    assert not os.path.exists(outfile + ".partial")
    arrays, mapping, attrs = _read(outfile)
    assert sorted(arrays, key=int) == [str(i) for i in range(len(SENTENCES))]
    assert mapping == {line.strip(): str(i) for i, line in enumerate(LINES)}
    assert attrs["output_format"] == output_format and not attrs["use_sentence_keys"]
    weights = R.read_weights(weight_file)
    for i, sentence in enumerate(SENTENCES):
        got = arrays[str(i)]
        assert got.dtype == np.float32
        if output_format == "all":
            assert got.shape == (3, len(sentence), 12)
            np.testing.assert_allclose(got, stateless_layers[i], atol=1e-5)
            oracle = R.bilm_forward(weights, options, R.char_ids([sentence], 7))["lm_embeddings"][0]
            np.testing.assert_allclose(got, oracle, atol=1e-5)
        else:
            expected = stateless_layers[i][-1] if output_format == "top" else stateless_layers[i].mean(axis=0)
            assert got.shape == (len(sentence), 12)  # (0, 12) for the whitespace-only line
            np.testing.assert_allclose(got, expected, atol=1e-5)


def test_sentence_keys_escape_what_hdf5_cannot_name_and_store_repeats_once(tmp_path, model):
    options_file, weight_file, _ = model
    lines = ["The cat / dog .", ".", "sentence_to_index", "100 % sure", "  The cat / dog . ",
             "naïve 中文 🙂", b"caf\xe9 ok", "sentence_to_index x"]
    input_file = _input_file(tmp_path, lines)
    embed_file(input_file, str(tmp_path / "lines.hdf5"), options_file, weight_file, output_format="top",
               batch_size=3, verbose=0)
    by_line, _, _ = _read(str(tmp_path / "lines.hdf5"))
    outfile = str(tmp_path / "keys.hdf5")
    written = embed_file(input_file, outfile, options_file, weight_file, output_format="top",
                         batch_size=3, use_sentence_keys=True, verbose=0)
    arrays, mapping, attrs = _read(outfile)
    assert written == 7 and attrs["use_sentence_keys"]
    assert sorted(arrays) == sorted(["The cat %2F dog .", "%2E", "%73entence_to_index", "100 %25 sure",
                                     "naïve 中文 🙂", "caf%E9 ok", "sentence_to_index x"])
    assert mapping["caf\udce9 ok"] == "caf%E9 ok" and len(mapping) == 7
    for i, line in enumerate(lines):
        sentence = line.strip() if isinstance(line, str) else line.decode("utf-8", "surrogateescape")
        assert mapping[sentence] == sentence_key(sentence)
        np.testing.assert_allclose(arrays[mapping[sentence]], by_line[str(i)], rtol=1e-5, atol=1e-5)


def test_blank_line_with_sentence_keys_is_an_error_naming_it(tmp_path, model):
    options_file, weight_file, _ = model
    outfile = tmp_path / "out.hdf5"
    with pytest.raises(ValueError, match=r"blank line\(s\) \(0-based line numbers 1\)"):
        embed_file(_input_file(tmp_path, ["a b", "   ", "c"]), str(outfile), options_file, weight_file,
                   use_sentence_keys=True, verbose=0)
    assert list(tmp_path.glob("out.hdf5*")) == []
    with pytest.raises(ValueError, match="empty sentence"):
        sentence_key("")


class Killed(Exception):
    """Stands for the process being killed mid-way."""


def _model_class(calls, die_after=None):
    """BidirectionalLanguageModel that records batch sizes and dies after `die_after` calls."""

    class Recording(BidirectionalLanguageModel):
        def __call__(self, ids, start=None):
            if die_after is not None and len(calls) == die_after:
                raise Killed
            calls.append(len(ids))
            return super().__call__(ids, start=start)

    return Recording


def test_a_killed_run_resumes_to_the_same_file(tmp_path, model, monkeypatch, capsys):
    options_file, weight_file, _ = model
    input_file = _input_file(tmp_path, LINES * 6)
    outfile = str(tmp_path / "out.hdf5")
    calls = []
    monkeypatch.setattr(sentence_datasets, "BidirectionalLanguageModel", _model_class(calls, die_after=2))
    with pytest.raises(Killed):
        embed_file(input_file, outfile, options_file, weight_file, batch_size=4, verbose=0)
    assert not os.path.exists(outfile)
    with h5py.File(outfile + ".partial", "r") as f:
        assert len(f) == 8

    with pytest.raises(ValueError, match="output_format.*no_resume"):
        embed_file(input_file, outfile, options_file, weight_file, output_format="top", verbose=0)

    calls.clear()
    monkeypatch.setattr(sentence_datasets, "BidirectionalLanguageModel", _model_class(calls))
    capsys.readouterr()
    assert embed_file(input_file, outfile, options_file, weight_file, batch_size=4, verbose=1) == 22
    assert sum(calls) == 22  # the 8 written sentences were not recomputed
    assert f"Resuming {outfile}.partial: 8 of 30 lines are done." in capsys.readouterr().out
    fresh = str(tmp_path / "fresh.hdf5")
    embed_file(input_file, fresh, options_file, weight_file, batch_size=4, verbose=0)
    (resumed, resumed_map, resumed_attrs), (expected, expected_map, expected_attrs) = _read(outfile), _read(fresh)
    assert resumed.keys() == expected.keys() and len(resumed) == 30
    assert resumed_map == expected_map and resumed_attrs == expected_attrs
    for key in expected:  # the same bytes: a resumed run's first batches hold other sentences
        assert np.array_equal(resumed[key], expected[key]), key


def test_a_run_resumed_with_another_batch_size_writes_the_bytes_of_an_uninterrupted_run(tmp_path, monkeypatch):
    options_file, weight_file, _ = write_model(tmp_path, **WHOLE_VECTORS)
    input_file = _input_file(tmp_path, LINES * 6)
    outfile = str(tmp_path / "out.hdf5")
    monkeypatch.setattr(sentence_datasets, "BidirectionalLanguageModel", _model_class([], die_after=2))
    with pytest.raises(Killed):
        embed_file(input_file, outfile, options_file, weight_file, batch_size=3, verbose=0)
    monkeypatch.undo()
    assert embed_file(input_file, outfile, options_file, weight_file, batch_size=5, verbose=0) == 6 * len(LINES) - 6
    fresh = str(tmp_path / "fresh.hdf5")
    embed_file(input_file, fresh, options_file, weight_file, verbose=0)  # the bulk batches: many sentences each
    (resumed, resumed_map, _), (expected, expected_map, _) = _read(outfile), _read(fresh)
    assert resumed.keys() == expected.keys() and resumed_map == expected_map
    for key in expected:
        assert np.array_equal(resumed[key], expected[key]), key


@pytest.mark.slow
@pytest.mark.parametrize("change, message", [
    ("input edited", "the input file's content changed"),
    ("other weights, same shapes", "the weight file changed"),
    ("other options, same shapes", "the model options changed"),
])
def test_a_resume_made_from_something_else_refuses_and_no_resume_starts_over(
        tmp_path, model, monkeypatch, change, message):
    options_file, weight_file, _ = model
    lines = ["a b c", "d e f g h i", "x y z", "p q"] * 3
    input_file = _input_file(tmp_path, lines)
    outfile = str(tmp_path / "out.hdf5")
    monkeypatch.setattr(sentence_datasets, "BidirectionalLanguageModel", _model_class([], die_after=1))
    with pytest.raises(Killed):
        embed_file(input_file, outfile, options_file, weight_file, batch_size=4, verbose=0)
    monkeypatch.undo()
    if change == "input edited":  # the 6-token line now holds 3 tokens, the file keeps its size
        _input_file(tmp_path, [line.replace("d e f g h i", "d-e f-g h-i") for line in lines])
    elif change == "other weights, same shapes":
        (tmp_path / "other").mkdir()
        _, weight_file, _ = write_model(tmp_path / "other", seed=1)
    else:
        options = json.loads(open(options_file).read())
        options["lstm"]["cell_clip"] = 2.5
        options_file = str(tmp_path / "options_clip.json")
        open(options_file, "w").write(json.dumps(options))
    with pytest.raises(OutputFileError, match=f"Cannot resume from .*out.hdf5.partial.*{message}.*--no_resume"):
        embed_file(input_file, outfile, options_file, weight_file, batch_size=4, verbose=0)
    assert embed_file(input_file, outfile, options_file, weight_file, batch_size=4, resume=False,
                      verbose=0) == len(lines)
    fresh = str(tmp_path / "fresh.hdf5")
    embed_file(input_file, fresh, options_file, weight_file, batch_size=3, verbose=0)
    (got, got_map, got_attrs), (expected, expected_map, expected_attrs) = _read(outfile), _read(fresh)
    assert got.keys() == expected.keys() and got_map == expected_map and got_attrs == expected_attrs
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["same path", "symlink", "hard link", "paths swapped"])
def test_an_output_that_is_the_input_or_not_bilms_is_never_written(tmp_path, model, case):
    options_file, weight_file, _ = model
    input_file = _input_file(tmp_path, LINES)
    original = open(input_file, "rb").read()
    output = {"same path": input_file, "symlink": str(tmp_path / "link.hdf5"),
              "hard link": str(tmp_path / "hard.hdf5"), "paths swapped": input_file}[case]
    if case == "symlink":
        os.symlink(input_file, output)
    elif case == "hard link":
        os.link(input_file, output)
    source = input_file
    if case == "paths swapped":  # `elmo.py out.hdf5 in.txt` with an earlier out.hdf5
        source = str(tmp_path / "out.hdf5")
        embed_file(input_file, source, options_file, weight_file, verbose=0)
        message = "in.txt already exists and is not a file that bilm wrote.*--overwrite"
    else:
        message = "is (the same file as )?the input .*in.txt"
    with pytest.raises(OutputFileError, match=message):
        embed_file(source, output, options_file, weight_file, verbose=0)
    with pytest.raises(OutputFileError, match="is (the same file as )?the input" if case != "paths swapped"
                       else "not a file that bilm wrote"):
        dump_bilm_embeddings(None, source, options_file, weight_file, output, verbose=0)
    assert open(input_file, "rb").read() == original
    assert not os.path.exists(output + ".partial")


@pytest.mark.slow
def test_cli_refuses_to_overwrite_its_input_with_one_error_line(tmp_path, model):
    options_file, weight_file, _ = model
    input_file = _input_file(tmp_path, LINES)
    original = open(input_file, "rb").read()
    env = dict(os.environ)
    result = warm_python.run(
        [sys.executable, "bin/elmo.py", input_file, input_file, "--options_file", options_file,
         "--weight_file", weight_file, "--overwrite"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and result.stdout == ""
    # The device line (bilm.commands.devices) comes first; then the one error line.
    assert [line for line in result.stderr.strip().splitlines() if not line.startswith("bilm: running on ")] == [
        f"Error: The output {input_file} is the input {input_file}; writing it would destroy the input. "
        "Choose another output path."]
    assert open(input_file, "rb").read() == original


@pytest.mark.slow
def test_cli_average_with_sentence_keys_starts_over_with_no_resume(tmp_path, model, stateless_layers):
    options_file, weight_file, _ = model
    lines = [line for line in LINES if line.strip()]
    input_file = _input_file(tmp_path, lines)
    outfile = tmp_path / "out.hdf5"
    with h5py.File(str(outfile) + ".partial", "w") as f:  # a stale run of another format
        f.attrs.update({"bilm_file": "sentence_embeddings", "output_format": "all"})
        f["The cat sat ."] = np.zeros(3)
    env = dict(os.environ)
    result = warm_python.run(
        [sys.executable, "bin/elmo.py", input_file, str(outfile), "--options_file", options_file,
         "--weight_file", weight_file, "--average", "--batch_size", "2", "--use_sentence_keys", "--no_resume"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Wrote 4 sentence datasets (average) to {outfile}" in result.stdout
    arrays, mapping, attrs = _read(outfile)
    assert attrs["output_format"] == "average" and sorted(arrays) == sorted(lines)
    for sentence, layer in zip(SENTENCES, stateless_layers):
        if sentence:
            np.testing.assert_allclose(arrays[" ".join(sentence)], layer.mean(axis=0), atol=1e-5)


# bin/elmo.py (sys.argv[1:]) that stops after its first batch (in the .partial, flushed) until a line comes on
# its stdin: a run caught mid-way.
PAUSED_RUN = """
import runpy
import sys

import bilm.io.formats.embedding_files as embedding_files

batches = embedding_files.length_sorted_batches


def paused(*args, **kwargs):
    for number, batch in enumerate(batches(*args, **kwargs)):
        if number == 1:
            print("ready", flush=True)
            sys.stdin.readline()
        yield batch


embedding_files.length_sorted_batches = paused
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.parametrize("first_flags", [[], ["--overwrite", "--no_resume"]])
def test_a_second_run_on_the_same_output_is_refused_whatever_the_flags_and_the_first_finishes(
        tmp_path, model, stateless_layers, first_flags):
    options_file, weight_file, _ = model
    input_file = _input_file(tmp_path, LINES)
    outfile = str(tmp_path / "out.hdf5")
    first = warm_python.Popen(
        [sys.executable, "-c", PAUSED_RUN, "bin/elmo.py", input_file, outfile, "--options_file", options_file,
         "--weight_file", weight_file, "--batch_size", "1", "--start", "zeros", *first_flags],
        cwd=ROOT, env=dict(os.environ), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        for line in first.stdout:  # after its progress bar's first line
            if line.strip().endswith("ready"):
                break
        else:
            raise AssertionError(first.stderr.read()[-3000:])
        partial = open(outfile + ".partial", "rb").read()
        refused = rf"^Another process \(PID {first.pid}\) is writing {outfile} \(it holds {outfile}.lock\)"
        for resume in (True, False):
            for overwrite in (False, True):
                with pytest.raises(OutputLockedError, match=refused):
                    embed_file(input_file, outfile, options_file, weight_file, resume=resume, overwrite=overwrite,
                               verbose=0)
                with pytest.raises(OutputLockedError, match=refused):
                    dump_bilm_embeddings(None, input_file, options_file, weight_file, outfile, resume=resume,
                                         overwrite=overwrite, verbose=0)
        main = runpy.run_path(os.path.join(ROOT, "bin", "elmo.py"))["main"]
        with pytest.raises(SystemExit) as exit_status:
            main([input_file, outfile, "--options_file", options_file, "--weight_file", weight_file, "--overwrite",
                  "--no_resume"])
        # One line, printed as the exit status (1) of the script.
        message = exit_status.value.code
        assert message.startswith(f"Error: Another process (PID {first.pid}) is writing {outfile} ")
        assert "\n" not in message
        assert open(outfile + ".partial", "rb").read() == partial
    finally:
        out, err = first.communicate("\n", timeout=300)
    assert first.returncode == 0, err[-3000:]
    assert f"Wrote {len(LINES)} sentence datasets (all) to {outfile}" in out
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.hdf5"]
    arrays, _, _ = _read(outfile)
    for i, layers in enumerate(stateless_layers):
        np.testing.assert_allclose(arrays[str(i)], layers, atol=1e-5)


def test_the_stamp_tells_a_finished_file_made_the_same_way_from_any_other(tmp_path, model):
    options_file, weight_file, _ = model
    input_file = _input_file(tmp_path, LINES)
    outfile = str(tmp_path / "out.hdf5")
    embed_file(input_file, outfile, options_file, weight_file, output_format="top", verbose=0)
    found = read_root_attributes(outfile)
    bilm = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros")
    assert changed_attributes(found, embeddings_stamp(bilm, input_file, "top")) == []
    assert changed_attributes(found, embeddings_stamp(bilm, input_file, "all")) == ["output_format"]
    assert changed_attributes(found, embeddings_stamp(bilm, input_file, "top", use_sentence_keys=True)) == [
        "use_sentence_keys"]
    other_input = _input_file(tmp_path, LINES[:2], name="other.txt")
    assert changed_attributes(found, embeddings_stamp(bilm, other_input, "top")) == ["input_size", "input_sha256"]
    other_options, other_weights, _ = write_model(tmp_path / "other_model" if (tmp_path / "other_model").mkdir()
                                                  is None else None, seed=1)
    other = BidirectionalLanguageModel(other_options, other_weights, stateful=False, start="zeros")
    assert changed_attributes(found, embeddings_stamp(other, input_file, "top")) == ["weight_sha256"]


def test_cli_arguments():
    main = runpy.run_path(os.path.join(ROOT, "bin", "elmo.py"))["main"]
    with pytest.raises(SystemExit):
        main(["in.txt", "out.hdf5", "--options_file", "o", "--weight_file", "w", "--all", "--top"])
    with pytest.raises(SystemExit):
        main(["in.txt", "out.hdf5", "--weight_file", "w"])


def test_empty_input_writes_a_file_without_sentences(tmp_path, model):
    options_file, weight_file, _ = model
    input_file = tmp_path / "empty.txt"
    input_file.write_text("")
    outfile = str(tmp_path / "out.hdf5")
    with pytest.warns(UserWarning, match="empty.txt is empty: wrote .*out.hdf5 with no sentence datasets"):
        assert embed_file(str(input_file), outfile, options_file, weight_file, verbose=1) == 0
    arrays, mapping, _ = _read(outfile)
    assert arrays == {} and mapping == {}


def test_bad_paths_and_arguments_fail_before_loading_the_model(tmp_path, model, monkeypatch):
    options_file, weight_file, _ = model
    missing_weights = str(tmp_path / "no_weights.hdf5")
    input_file = _input_file(tmp_path, LINES)
    outfile = str(tmp_path / "out.hdf5")

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the bad input was found")

    monkeypatch.setattr(sentence_datasets, "BidirectionalLanguageModel", no_model)
    with pytest.raises(FileNotFoundError, match="Input file not found: .*nope.txt"):
        embed_file(str(tmp_path / "nope.txt"), outfile, options_file, weight_file)
    with pytest.raises(ValueError, match="output_format must be one of.*'mean'"):
        embed_file(input_file, outfile, options_file, missing_weights, output_format="mean")
    with pytest.raises(ValueError, match="batch_size=0"):
        embed_file(input_file, outfile, options_file, missing_weights, batch_size=0)
    with pytest.raises(ValueError, match="Weight file not found: .*no_weights.hdf5"):
        embed_file(input_file, outfile, options_file, missing_weights)
    with open(outfile + ".partial", "wb") as f:
        f.write(b"not hdf5")
    with pytest.raises(OutputFileError, match="partial already exists and is not a file that bilm wrote.*"
                                              "--overwrite"):
        embed_file(input_file, outfile, options_file, weight_file)
    assert not os.path.exists(outfile) and open(outfile + ".partial", "rb").read() == b"not hdf5"


def _dataset_file(tmp_path, sentences):
    path = tmp_path / "sentences.txt"
    path.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    return str(path)


def test_dump_bilm_embeddings_layout_and_values(tmp_path):
    options_file, weight_file, options = write_model(tmp_path)
    vocab_file = write_vocab(tmp_path, ["The", "cat"])
    dataset_file = _dataset_file(tmp_path, SENTENCES)
    outfile = str(tmp_path / "out.hdf5")
    dump_bilm_embeddings(vocab_file, dataset_file, options_file, weight_file, outfile,
                         batch_size=2, verbose=0)
    weights = R.read_weights(weight_file)
    with h5py.File(outfile, "r") as f:
        assert sorted(f.keys(), key=int) == [str(i) for i in range(len(SENTENCES))]
        for i, sentence in enumerate(SENTENCES):
            got = f[str(i)][...]
            assert got.shape == (3, len(sentence), 12) and got.dtype == np.float32
            ref = R.bilm_forward(weights, options, R.char_ids([sentence], 7))["lm_embeddings"][0]
            np.testing.assert_allclose(got, ref, atol=1e-5)
    assert not (tmp_path / "out.hdf5.partial").exists()


@pytest.mark.slow
def test_dump_batch_size_does_not_change_results(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path, **WHOLE_VECTORS)
    dataset_file = _dataset_file(tmp_path, SENTENCES * 3)
    results = []
    for batch_size in (1, 7):
        outfile = str(tmp_path / f"out{batch_size}.hdf5")
        dump_bilm_embeddings(None, dataset_file, options_file, weight_file, outfile,
                             batch_size=batch_size, verbose=0)
        with h5py.File(outfile, "r") as f:
            results.append({k: f[k][...] for k in f})
    assert results[0].keys() == results[1].keys()
    for key in results[0]:  # the same bytes (bilm.ops.batch_invariant)
        assert np.array_equal(results[0][key], results[1][key]), key


@pytest.mark.slow
def test_dump_creates_a_missing_output_directory_and_names_a_missing_input(tmp_path, capsys):
    options_file, weight_file, _ = write_model(tmp_path)
    dataset_file = _dataset_file(tmp_path, SENTENCES)
    outfile = tmp_path / "missing" / "out.hdf5"
    assert dump_bilm_embeddings(None, dataset_file, options_file, weight_file, str(outfile), verbose=0) == 5
    assert outfile.exists()
    with pytest.raises(FileNotFoundError, match="Input file not found: .*nope.txt"):
        dump_bilm_embeddings(None, str(tmp_path / "nope.txt"), options_file, weight_file,
                             str(tmp_path / "out.hdf5"), verbose=0)
    with pytest.raises(ValueError, match="Input .*missing is a directory: give one text file"):
        dump_bilm_embeddings(None, str(tmp_path / "missing"), options_file, weight_file,
                             str(tmp_path / "out.hdf5"), verbose=0)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.warns(UserWarning, match="empty.txt is empty: wrote .*empty.hdf5 with no sentence datasets"):
        assert dump_bilm_embeddings(None, str(empty), options_file, weight_file, str(tmp_path / "empty.hdf5"),
                                    verbose=0) == 0


@pytest.mark.slow
def test_warm_up_gives_the_warm_vectors_and_is_part_of_what_a_resume_checks(tmp_path, model, monkeypatch):
    options_file, weight_file, _ = model
    warm_up_file = _input_file(tmp_path, [line for line in LINES if line.strip()] * 4, name="warm_up.txt")
    input_file = _input_file(tmp_path, LINES * 3)
    outfile = str(tmp_path / "out.hdf5")
    embed_file(input_file, outfile, options_file, weight_file, output_format="top", batch_size=4,
               warm_up=warm_up_file, verbose=0)
    arrays, _, attrs = _read(outfile)
    assert attrs["start"] == "warm" and len(attrs["boundary_state_sha256"]) == 64
    expected = ELMo(options_file, weight_file, warm_up=warm_up_file).embed(
        [line.split() for line in LINES * 3], layers="top")
    for i, vectors in enumerate(expected):
        # Float32 round-off apart: the two batch the sentences differently, and products of
        # different row counts may sum in different orders (bilm's kernel or TensorFlow's).
        np.testing.assert_allclose(arrays[str(i)], vectors, rtol=1e-5, atol=1e-5 * np.abs(vectors).max(initial=1.0))
    # A run killed mid-way, resumed with another warm-up text, refuses to mix the two.
    monkeypatch.setattr(sentence_datasets, "BidirectionalLanguageModel", _model_class([], die_after=1))
    with pytest.raises(Killed):
        embed_file(input_file, str(tmp_path / "killed.hdf5"), options_file, weight_file, batch_size=4,
                   warm_up=warm_up_file, verbose=0)
    monkeypatch.undo()
    other_text = _input_file(tmp_path, ["x y z", "p q r s"] * 6, name="other.txt")
    with pytest.raises(OutputFileError, match="the boundary state changed.*--no_resume"):
        embed_file(input_file, str(tmp_path / "killed.hdf5"), options_file, weight_file, batch_size=4,
                   warm_up=other_text, verbose=0)
    zeros = str(tmp_path / "zeros.hdf5")
    dump_bilm_embeddings(None, input_file, options_file, weight_file, zeros, start="zeros", verbose=0)
    with h5py.File(zeros, "r") as f:
        assert f.attrs["start"] == "zeros" and f.attrs["boundary_state_sha256"] == ""
