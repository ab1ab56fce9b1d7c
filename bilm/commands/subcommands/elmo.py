"""Writes the ELMo vectors of every line of a text file to HDF5 (AllenNLP's `elmo` command).

One whitespace-tokenized sentence per input line; one dataset per line, named
by line number (or by the sentence with --use_sentence_keys), holding
(n_layers + 1, n_tokens, 2P) with --all (the default) or (n_tokens, 2P) with
--top / --average, plus 'sentence_to_index' (JSON: sentence -> dataset name).

The model is --model (a directory, an ELMoForManyLangs model or a TF-Hub
module of ELMo, a .zip or tar archive, its URL, or a published model's name
such as allennlp:original-5.5b, nlpl:209 or efml:fi, as bilm.load takes them; names
are fetched from $BILM_MODEL_MIRROR if set) or the pair --options_file and
--weight_file.

The output is never one of the inputs, and an existing file is only replaced
if bilm wrote it as an embedding file (or with --overwrite). An interrupted
run leaves OUTPUT.partial; rerunning the same command continues it, and a
rerun with another input, model or format refuses to mix them.
"""
from bilm.commands import (
    ScriptArgumentParser,
    add_embedding_run_arguments,
    add_model_arguments,
    add_output_format_arguments,
    announce_devices,
    check_model_arguments,
    exit_on_user_error,
    model_files,
    set_numerics,
)
from bilm.export import embed_file


def main(argv=None, prog=None):
    parser = ScriptArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("input_file", help="Text, one whitespace-tokenized sentence per line.")
    parser.add_argument("output_file", help="HDF5 file to write (its directory is created if missing).")
    add_model_arguments(parser)
    add_output_format_arguments(parser)
    add_embedding_run_arguments(parser, "OUTPUT")
    args = parser.parse_args(argv)
    check_model_arguments(parser, args)
    set_numerics(tf32=args.tf32)  # float32 stays float32 on a GPU unless --tf32
    announce_devices()
    with exit_on_user_error():
        pair = model_files(args)
        written = embed_file(args.input_file, args.output_file, *pair,
                             output_format=args.output_format, batch_size=args.batch_size,
                             use_sentence_keys=args.use_sentence_keys, resume=args.resume,
                             overwrite=args.overwrite, start=args.start, warm_up=args.warm_up,
                             kernel_dtype=args.kernel_dtype)
    print(f"Wrote {written} sentence datasets ({args.output_format}) to {args.output_file} in this run.")

