"""Writes the char-CNN embedding of every vocabulary token to an HDF5 file.

The file (one dataset 'embedding', (n_vocab, P)) is what a token-input
BidirectionalLanguageModel reads as embedding_weight_file. An existing file
is only replaced if bilm wrote it as a token embedding file (or with
--overwrite), and never if it is one of the inputs.
"""
from bilm.commands import (
    ScriptArgumentParser,
    add_tf32_argument,
    announce_devices,
    exit_on_user_error,
    positive_int,
    set_numerics,
)
from bilm.export import dump_token_embeddings


def main(argv=None, prog=None):
    parser = ScriptArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--vocab_file", required=True, help="One token per line.")
    parser.add_argument("--options_file", required=True, help="The model's options.json (a character model).")
    parser.add_argument("--weight_file", required=True, help="The model's HDF5 weights.")
    parser.add_argument("--outfile", required=True,
                        help="HDF5 output with dataset 'embedding' (its directory is created if missing).")
    parser.add_argument("--batch_size", type=positive_int, default=512, help="Tokens per model call.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace an existing OUTFILE that bilm did not write.")
    add_tf32_argument(parser)
    args = parser.parse_args(argv)
    set_numerics(tf32=args.tf32)  # float32 stays float32 on a GPU unless --tf32
    announce_devices()
    with exit_on_user_error():
        shape = dump_token_embeddings(args.vocab_file, args.options_file, args.weight_file, args.outfile,
                                      batch_size=args.batch_size, overwrite=args.overwrite)
    print(f"Wrote the embeddings of {shape[0]} tokens, shape {shape}, to {args.outfile}.")

