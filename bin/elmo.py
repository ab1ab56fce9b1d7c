#!/usr/bin/env python
"""Writes the ELMo vectors of every line of a text file to HDF5 (AllenNLP's `elmo` command).

One whitespace-tokenized sentence per input line; one dataset per line, named
by line number (or by the sentence with --use_sentence_keys), holding
(n_layers + 1, n_tokens, 2P) with --all (the default) or (n_tokens, 2P) with
--top / --average, plus 'sentence_to_index' (JSON: sentence -> dataset name).

The output is never one of the inputs, and an existing file is only replaced
if bilm wrote it as an embedding file (or with --overwrite). An interrupted
run leaves OUTPUT.partial; rerunning the same command continues it, and a
rerun with another input, model or format refuses to mix them.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads

from bilm.commands.sentence_embeddings import embed_file  # noqa: E402
from bilm.commands.user_errors import exit_on_user_error  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input_file", help="Text, one whitespace-tokenized sentence per line.")
    parser.add_argument("output_file", help="HDF5 file to write (its directory is created if missing).")
    parser.add_argument("--options_file", required=True, help="The model's options.json.")
    parser.add_argument("--weight_file", required=True, help="The model's HDF5 weights.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--all", dest="output_format", action="store_const", const="all",
                       help="All biLM layers, (n_layers + 1, n_tokens, 2P) per sentence (default).")
    group.add_argument("--top", dest="output_format", action="store_const", const="top",
                       help="The top layer, (n_tokens, 2P).")
    group.add_argument("--average", dest="output_format", action="store_const", const="average",
                       help="The mean of the layers, (n_tokens, 2P).")
    parser.set_defaults(output_format="all")
    parser.add_argument("--batch_size", type=int, default=64, help="Sentences per model call.")
    parser.add_argument("--use_sentence_keys", action="store_true",
                        help="Name each dataset by its sentence instead of its line number ('%%', '/' and a "
                             "lone '.' are percent-encoded, see docs/formats.md; a repeated sentence is "
                             "stored once; blank lines are an error).")
    parser.add_argument("--no_resume", dest="resume", action="store_false",
                        help="Start over instead of continuing OUTPUT.partial from an interrupted run.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace an existing OUTPUT (or OUTPUT.partial) that bilm did not write.")
    args = parser.parse_args(argv)
    with exit_on_user_error():
        written = embed_file(args.input_file, args.output_file, args.options_file, args.weight_file,
                             output_format=args.output_format, batch_size=args.batch_size,
                             use_sentence_keys=args.use_sentence_keys, resume=args.resume,
                             overwrite=args.overwrite)
    print(f"Wrote {written} sentence datasets ({args.output_format}) to {args.output_file} in this run.")


if __name__ == "__main__":
    main()
