"""Writes every sentence's biLM layers (n_layers + 1, n_tokens, 2P) to an HDF5 file.

One dataset per line, named by line number (bilm-tf's dump layout). The
output is never one of the inputs, and an existing file is only replaced if
bilm wrote it as an embedding file (or with --overwrite). An interrupted run
leaves OUTFILE.partial; rerunning the same command continues it.
"""
from bilm.commands import (
    ScriptArgumentParser,
    add_embedding_run_arguments,
    add_model_arguments,
    announce_devices,
    check_model_arguments,
    exit_on_user_error,
    model_files,
    set_numerics,
)
from bilm.export import dump_bilm_embeddings


def main(argv=None, prog=None):
    parser = ScriptArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--vocab_file", default=None,
                        help="Optional vocabulary (a cache of character ids).")
    parser.add_argument("--dataset_file", required=True,
                        help="One whitespace-tokenized sentence per line.")
    add_model_arguments(parser)
    parser.add_argument("--outfile", required=True,
                        help="HDF5 output, one dataset per line (its directory is created if missing).")
    add_embedding_run_arguments(parser, "OUTFILE")
    args = parser.parse_args(argv)
    check_model_arguments(parser, args)
    set_numerics(tf32=args.tf32)  # float32 stays float32 on a GPU unless --tf32
    announce_devices()
    with exit_on_user_error():
        written = dump_bilm_embeddings(args.vocab_file, args.dataset_file, *model_files(args), args.outfile,
                                       batch_size=args.batch_size, resume=args.resume, overwrite=args.overwrite,
                                       start=args.start, warm_up=args.warm_up, kernel_dtype=args.kernel_dtype)
    print(f"Wrote {written} sentence datasets to {args.outfile} in this run.")

