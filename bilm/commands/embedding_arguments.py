"""The flags that `bin/elmo.py` and `bin/dump_bilm_embeddings.py` share."""
from bilm.models.start_state import STARTS
from bilm.ops.matmul_dtype import MATMUL_DTYPES


def add_embedding_run_arguments(parser, output_name="OUTPUT"):
    """The flags that `bin/elmo.py` and `bin/dump_bilm_embeddings.py` share:
    how the model runs and how the output file is written."""
    parser.add_argument("--batch_size", type=int,
                        help="Sentences per model call (default: calls of about 4,096 tokens, sentences "
                             "batched by length).")
    parser.add_argument("--start", choices=STARTS,
                        help="Where each sentence's LSTMs start: warm, the boundary state (the mean state at "
                             "sentence starts in training, stored by bilm's training or made by --warm_up), or "
                             "zeros (default: warm when there is a boundary state, else zeros).")
    parser.add_argument("--warm_up", metavar="FILE",
                        help="Compute the boundary state from the first 1,000 sentences of this text file "
                             "(one per line), for weights that carry none, such as the published ones.")
    parser.add_argument("--matmul_dtype", choices=MATMUL_DTYPES, default="float32",
                        help="bfloat16: keep the model's kernels in bfloat16 (faster on CPUs and GPUs with "
                             "bfloat16 matmuls; vectors within 3%% of float32's, see docs/performance.md).")
    parser.add_argument("--no_resume", dest="resume", action="store_false",
                        help=f"Start over instead of continuing {output_name}.partial from an interrupted run.")
    parser.add_argument("--overwrite", action="store_true",
                        help=f"Replace an existing {output_name} (or {output_name}.partial) that bilm did not "
                             "write.")
