"""The flags bin/elmo.py and bin/dump_bilm_embeddings.py share: defaults, choices, and what their help names."""
import argparse

import pytest

from bilm.commands.embedding_arguments import add_embedding_run_arguments


def _parser(output_name="OUTPUT"):
    parser = argparse.ArgumentParser(prog="elmo.py")
    add_embedding_run_arguments(parser, output_name)
    return parser


def test_defaults_leave_the_choices_to_the_library():
    args = vars(_parser().parse_args([]))
    assert args == {"batch_size": None, "start": None, "warm_up": None, "kernel_dtype": "float32", "tf32": False,
                    "resume": True, "overwrite": False}


def test_each_flag_is_read():
    args = _parser().parse_args(["--batch_size", "16", "--start", "zeros", "--warm_up", "text.txt", "--kernel_dtype",
                                 "bfloat16", "--tf32", "--no_resume", "--overwrite"])
    assert (args.batch_size, args.start, args.warm_up, args.kernel_dtype) == (16, "zeros", "text.txt", "bfloat16")
    assert args.tf32 is True and args.resume is False and args.overwrite is True
    assert _parser().parse_args(["--start", "warm"]).start == "warm"


@pytest.mark.parametrize("flags", [["--start", "carry"], ["--kernel_dtype", "float16"], ["--matmul_dtype", "float16"],
                                   ["--batch_size", "many"]])
def test_values_outside_the_choices_are_usage_errors(flags, capsys):
    with pytest.raises(SystemExit) as stop:
        _parser().parse_args(flags)
    assert stop.value.code == 2 and "invalid" in capsys.readouterr().err


def test_the_help_names_the_output_of_each_script():
    assert "OUTFILE.partial" in _parser("OUTFILE").format_help()
    assert "OUTPUT.partial" in _parser("OUTPUT").format_help()


def test_the_old_name_of_kernel_dtype_works_with_one_warning_line_and_hides_from_the_help(capsys):
    assert _parser().parse_args(["--matmul_dtype", "int8"]).kernel_dtype == "int8"
    assert capsys.readouterr().err == "Warning: elmo.py: --matmul_dtype is deprecated; use --kernel_dtype.\n"
    assert _parser().parse_args(["--kernel_dtype", "int8"]).kernel_dtype == "int8"
    assert capsys.readouterr().err == ""
    help_text = _parser().format_help()
    assert "--kernel_dtype" in help_text and "--matmul_dtype" not in help_text


def test_the_kernel_dtype_under_both_names_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        _parser().parse_args(["--kernel_dtype", "int8", "--matmul_dtype", "int8"])
    assert stop.value.code == 2 and "not allowed with" in capsys.readouterr().err
