"""The flags that the embedding scripts share (`bin/elmo.py`, `bin/dump_bilm_embeddings.py`, `python -m bilm.beam`)."""
from bilm.commands.argument_parser import add_renamed_flag, positive_int
from bilm.commands.devices import add_tf32_argument
from bilm.io.sources.model_files import locate_model
from bilm.models.start_state import STARTS
from bilm.ops.kernel_dtypes import KERNEL_DTYPES


def add_embedding_run_arguments(parser, output_name="OUTPUT"):
    """The flags that `bin/elmo.py` and `bin/dump_bilm_embeddings.py` share:
    how the model runs and how the output file is written."""
    parser.add_argument("--batch_size", type=positive_int,
                        help="Sentences per model call (default: calls of about 4,096 tokens, sentences "
                             "batched by length).")
    add_start_arguments(parser)
    parser.add_argument("--no_resume", dest="resume", action="store_false",
                        help=f"Start over instead of continuing {output_name}.partial from an interrupted run.")
    parser.add_argument("--overwrite", action="store_true",
                        help=f"Replace an existing {output_name} (or {output_name}.partial) that bilm did not "
                             "write.")


def add_start_arguments(parser):
    """--start, --warm_up, --kernel_dtype (hidden old name: --matmul_dtype) and --tf32: where each sentence
    starts and which kernels run."""
    parser.add_argument("--start", choices=STARTS,
                        help="Where each sentence's LSTMs start: warm, the boundary state (the mean state at "
                             "sentence starts in training, stored by bilm's training or made by --warm_up), or "
                             "zeros (default: warm when there is a boundary state, else zeros).")
    parser.add_argument("--warm_up", metavar="FILE",
                        help="Compute the boundary state from the first 1,000 sentences of this text file "
                             "(one per line), for weights that carry none, such as the published ones.")
    add_renamed_flag(parser, "--kernel_dtype", "--matmul_dtype", choices=KERNEL_DTYPES, default="float32",
                     help="bfloat16 or int8 (per-column scales): keep the model's kernels in 16 or 8 bits, "
                          "half or a quarter of the bytes (one sentence at a time faster on an AVX2 CPU; "
                          "vectors within 3%% / 5%% of float32's, see docs/performance.md).")
    add_tf32_argument(parser)


def add_output_format_arguments(parser):
    """--all (the default), --top or --average: what each sentence's dataset holds (`output_format`), and
    --use_sentence_keys."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--all", dest="output_format", action="store_const", const="all",
                       help="All biLM layers, (n_layers + 1, n_tokens, 2P) per sentence (default).")
    group.add_argument("--top", dest="output_format", action="store_const", const="top",
                       help="The top layer, (n_tokens, 2P).")
    group.add_argument("--average", dest="output_format", action="store_const", const="average",
                       help="The mean of the layers, (n_tokens, 2P).")
    parser.set_defaults(output_format="all")
    parser.add_argument("--use_sentence_keys", action="store_true",
                        help="Name each dataset by its sentence instead of its line number ('%%', '/' and a "
                             "lone '.' are percent-encoded, see docs/formats.md; a repeated sentence is "
                             "stored once; blank lines are an error).")


def add_model_arguments(parser):
    """The model as --model (a directory, zip, URL or published name) or as
    --options_file and --weight_file; read back with `model_files`."""
    parser.add_argument("--model", metavar="DIR|ZIP|URL|NAME",
                        help="The model: a directory holding its options and HDF5 weights (or an "
                             "ELMoForManyLangs model, a TF-Hub module of ELMo), a .zip or tar archive of one, its "
                             "URL, or a published model's name such as efml:fi (downloaded, extracted and "
                             "converted once into --cache_dir).")
    parser.add_argument("--cache_dir", help="Where --model downloads, extracted archives and converted models are "
                                            "kept (default: $BILM_CACHE, else ~/.cache/bilm).")
    parser.add_argument("--sha256", help="The expected SHA-256 of the --model archive.")
    parser.add_argument("--options_file", help="The model's options.json (with --weight_file, instead of --model).")
    parser.add_argument("--weight_file", help="The model's HDF5 weights (with --options_file, instead of --model).")


def check_model_arguments(parser, args):
    """Exits with a usage error unless the model was given exactly one way."""
    pair = (args.options_file, args.weight_file)
    if args.model is not None and any(pair):
        parser.error("give the model either as --model or as --options_file and --weight_file, not both")
    if args.model is None and not all(pair):
        parser.error("give the model as --model DIR|ZIP|URL|NAME, or as both --options_file and --weight_file")
    if args.model is None and (args.cache_dir or args.sha256):
        parser.error("--cache_dir and --sha256 go with --model")


def model_files(args):
    """`(options_file, weight_file)` of the model the flags name (downloading it if needed)."""
    if args.model is None:
        return args.options_file, args.weight_file
    files = locate_model(args.model, cache_dir=args.cache_dir, sha256=args.sha256)
    return files.options_file, files.weight_file
