"""The scripts' parser: one `Error:` line for a bad flag, advice for an unquoted pattern, defaults in --help."""
import pytest

from bilm.commands.argument_parser import ScriptArgumentParser


def _parser():
    parser = ScriptArgumentParser(prog="train_elmo.py", description="Trains.\n\n  keeps this layout")
    parser.add_argument("--train_prefix", required=True)
    parser.add_argument("--batch_size", type=int, default=128, help="rows per batch")
    parser.add_argument("--seed", type=int, default=0, help="the seed (default: %(default)s)")
    parser.add_argument("--log_dir", help="summaries")
    return parser


def _error(capsys, argv):
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("Error: train_elmo.py: ")
    return err


def test_a_bad_flag_is_one_error_line(capsys):
    assert "argument --batch_size: invalid int value: 'many'" in _error(capsys, ["--train_prefix", "x",
                                                                                  "--batch_size", "many"])
    assert "the following arguments are required: --train_prefix" in _error(capsys, [])
    assert "unrecognized arguments: --bach_size 3" in _error(capsys, ["--train_prefix", "x", "--bach_size", "3"])


def test_an_unquoted_pattern_is_told_to_be_quoted(tmp_path, capsys):
    shards = [tmp_path / f"shard_{i}.txt" for i in range(3)]
    for shard in shards:
        shard.write_text("a b\n")
    err = _error(capsys, ["--train_prefix", *map(str, shards), "--batch_size", "4"])
    assert f"unrecognized arguments: {shards[1]} {shards[2]}" in err
    assert "The shell expanded the pattern of --train_prefix into several files; quote the pattern" in err


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert "rows per batch (default: 128)" in out and "the seed (default: 0)" in out
    assert "summaries\n" in out and "  keeps this layout" in out


def test_help_shows_no_default_for_switches(capsys):
    # --top/--average share output_format's default ("all"), --no_resume stores False into resume
    # (default True): neither default is the switch's own.
    parser = ScriptArgumentParser(prog="x")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--all", dest="output_format", action="store_const", const="all", help="all layers")
    group.add_argument("--top", dest="output_format", action="store_const", const="top", help="the top layer")
    parser.set_defaults(output_format="all")
    parser.add_argument("--no_resume", dest="resume", action="store_false", help="start over")
    parser.add_argument("--size", default="small", help="the size")
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    out = capsys.readouterr().out
    assert "(default: all)" not in out and "(default: True)" not in out
    assert "the size (default: small)" in out


def test_train_elmos_help_shows_the_model_to_choose(capsys):
    """One of --options_file, --size and --init_from is required (they are not exclusive: --init_from takes an
    options file of training keys), so the usage line and a group of their own say so."""
    from bilm.commands.subcommands import train_elmo

    with pytest.raises(SystemExit) as exited:
        train_elmo.main(["--help"], prog="train_elmo.py")
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: train_elmo.py --train_prefix PATTERN --vocab_file FILE --save_dir DIR\n"
                          "       (--options_file FILE | --size {small,medium,original} | --init_from MODEL "
                          "[--options_file FILE])\n")
    group = out[out.index("the model (one of --options_file, --size or --init_from is required):"):]
    assert group.index("--options_file") < group.index("--size") < group.index("--init_from")
