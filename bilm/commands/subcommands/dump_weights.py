"""Writes the latest checkpoint of --save_dir as a weight file for prediction.

Beside --outfile go its options (n_characters 262), `<outfile>_options.json`,
and for token inputs `<outfile>_token_embeddings.hdf5`; then
BidirectionalLanguageModel(options_file, outfile) loads them as they are.
An existing --outfile is only replaced if bilm wrote it as a weight file,
an existing options file only if it holds the same options (or either with
--overwrite), and never a file of --save_dir.
"""

from bilm.commands import (
    ScriptArgumentParser,
    announce_devices,
    exit_on_user_error,
    set_numerics,
)
from bilm.training import dump_weights


def main(argv=None, prog=None):
    parser = ScriptArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--save_dir", required=True, help="the training directory")
    parser.add_argument("--outfile", required=True, help="HDF5 weight file to write, e.g. weights.hdf5")
    parser.add_argument("--options_outfile", help="prediction options (default: <outfile>_options.json)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing OUTFILE that bilm did not write as a weight file, and an "
                             "existing options file that holds other options")
    args = parser.parse_args(argv)
    set_numerics()  # a token-input model's embedding file is computed in float32 on a GPU too
    announce_devices()
    with exit_on_user_error():
        written = dump_weights(args.save_dir, args.outfile, args.options_outfile, overwrite=args.overwrite)
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return written

