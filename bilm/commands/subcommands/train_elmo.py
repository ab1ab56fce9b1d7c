"""Trains a biLM on your own corpus (bilm-tf's bin/train_elmo.py).

The model is --options_file (the model and training keys, see
docs/formats.md) or a released size, --size: small (2x1024_128, suits a
CPU), medium (2x2048_256) or original (2x4096_512, the published ELMo; wants
GPUs), trained with the original recipe (10 epochs, batch 128 x 20, 8192
negatives, Adagrad 0.2, dropout 0.1). The flags below override single
training keys.

--init_from MODEL adapts a published model to your text instead: MODEL is
anything bilm.load opens (a directory, its options or weight file, a .zip,
a URL, a published name such as small or nlpl:209). The architecture and
the char CNN, highway, projection and LSTM weights are the model's; the
softmax over --vocab_file is new (--softmax_init); the training keys come
from --options_file (which may repeat the model's architecture, not change
it) or the defaults, and the flags.

Ctrl-C (SIGINT) or SIGTERM finishes the step in progress, saves it and exits
(status 130 or 143) with the bin/restart.py command that continues exactly;
a second signal waits for the save.
"""

from bilm.commands import (
    ScriptArgumentParser,
    add_training_arguments,
    exit_unless_training_backend,
    run_training_script,
)
from bilm.training import DEFAULT_SOFTMAX_INIT, SOFTMAX_INITS

# The required choice of a model stands in the usage line, which argparse cannot say of flags that combine.
USAGE = ("%(prog)s --train_prefix PATTERN --vocab_file FILE --save_dir DIR\n"
         "       (--options_file FILE | --size {small,medium,original} | --init_from MODEL [--options_file FILE])\n"
         "       [training flags below]")


def main(argv=None, prog=None):
    exit_unless_training_backend("Training (bin/train_elmo.py)")
    parser = ScriptArgumentParser(prog=prog, description=__doc__, usage=USAGE)
    add_training_arguments(parser)
    model = parser.add_argument_group("the model (one of --options_file, --size or --init_from is required)")
    model.add_argument("--options_file", help="options.json with the model and training keys (with --init_from: "
                                              "training keys alone)")
    model.add_argument("--size", choices=("small", "medium", "original"),
                       help="a released size instead of --options_file: small suits a CPU, medium and original "
                            "want GPUs")
    model.add_argument("--init_from", metavar="MODEL",
                       help="adapt this published model (directory, options or weight file, .zip, URL or name) "
                            "to your text: its architecture and weights, a new softmax over --vocab_file")
    model.add_argument("--softmax_init", choices=SOFTMAX_INITS, default=DEFAULT_SOFTMAX_INIT,
                       help="with --init_from, where the new softmax starts: fit (to the model's outputs on the "
                            "start of your text), encoding (each word's encoding by the model, scaled; zero bias) or "
                            "random (as from scratch) (default: %(default)s)")
    return run_training_script(parser.parse_args(argv))

