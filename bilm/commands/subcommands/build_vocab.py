"""Writes a biLM training vocabulary (<S>, </S>, <UNK>, then tokens by count)."""
from bilm.commands import (
    ScriptArgumentParser,
    exit_on_user_error,
    positive_int,
)
from bilm.training import build_vocab


def main(argv=None, prog=None):
    parser = ScriptArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--train_prefix", required=True, help="glob of the training shards, e.g. 'data/train/*.txt'")
    parser.add_argument("--vocab_file", required=True, help="path of the vocabulary file to write")
    parser.add_argument("--min_count", type=positive_int, default=1, help="keep tokens seen at least this often")
    parser.add_argument(
        "--max_size", type=positive_int, default=None, help="most lines in the file, <S> </S> <UNK> included"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --vocab_file")
    args = parser.parse_args(argv)
    with exit_on_user_error():
        size = build_vocab(args.train_prefix, args.vocab_file, min_count=args.min_count, max_size=args.max_size,
                           overwrite=args.overwrite)
    print(f"Wrote {size} tokens (<S>, </S>, <UNK> and {size - 3} from {args.train_prefix}) to {args.vocab_file}")

