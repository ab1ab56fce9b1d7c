"""python -m bilm.beam --input PATTERN --output_dir DIR --model ...: the ELMo vectors of text shards, on Apache Beam.

Each file that PATTERN names (local or in a bucket: quote the pattern)
is one shard, one whitespace-tokenized sentence per line; its vectors go to
DIR/NAME.hdf5 in bin/elmo.py's layout (the same datasets, names and
attributes as `bin/elmo.py SHARD OUTPUT` with the same model and flags).
Shards are spread over the workers; each worker process loads the model
once. An output is written under a temporary name and renamed when
complete; a rerun skips the shards whose output is complete and made the
same way, and never replaces a file that bilm did not write (unless
--overwrite).

The model is --model (a directory, a .zip, its URL, a published name, or a
.zip in a bucket such as gs://bucket/model.zip), or --options_file and
--weight_file; every worker must reach it, and downloads go to each
machine's --cache_dir once. Flags that bilm does not know are Beam's
pipeline options: --runner (FnApiRunner with --direct_running_mode
multi_processing --direct_num_workers N runs N local worker processes;
DataflowRunner, FlinkRunner, SparkRunner), --project, --region,
--temp_location, ... (see docs/beam.md).

SIGINT (Ctrl-C) and SIGTERM stop a pipeline on this machine (FnApiRunner,
in memory or multi_processing) within seconds, whatever it is doing: its
worker processes are ended, what they were writing is removed, and the
command exits with status 130 (SIGINT) or 143 (SIGTERM) after one line,
`Stopped by SIGINT.`. Rerun the command to go on.
"""
import contextlib
import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow loads

import apache_beam as beam  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402

from bilm.beam.embedding_files import METRICS_NAMESPACE, EmbedFiles, remove_temporaries, shard_outputs  # noqa: E402
from bilm.beam.file_systems import is_bucket_path  # noqa: E402
from bilm.beam.model_handler import ELMoModelHandler  # noqa: E402
from bilm.beam.stopping import LocalRunner, stop_on_signals  # noqa: E402
from bilm.commands.argument_parser import ScriptArgumentParser  # noqa: E402
from bilm.commands.devices import announce_devices, set_numerics  # noqa: E402
from bilm.commands.embedding_arguments import (  # noqa: E402
    add_model_arguments,
    add_output_format_arguments,
    add_start_arguments,
    check_model_arguments,
)
from bilm.commands.user_errors import exit_on_user_error  # noqa: E402
from bilm.io.sources.model_cache import is_url  # noqa: E402
from bilm.io.sources.model_files import locate_model  # noqa: E402


def make_parser():
    parser = ScriptArgumentParser(prog="python -m bilm.beam", description=__doc__, allow_abbrev=False)
    parser.add_argument("--input", required=True, metavar="PATTERN",
                        help="The text shards: a file, or a quoted glob such as 'corpus/*.txt' or "
                             "'gs://bucket/corpus/*'.")
    parser.add_argument("--output_dir", required=True, metavar="DIR",
                        help="Where each shard's NAME.hdf5 goes (created if local and missing).")
    add_model_arguments(parser)
    add_output_format_arguments(parser)
    add_start_arguments(parser)
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace existing outputs that bilm did not write.")
    return parser


def parse_arguments(argv=None):
    """`(bilm's arguments, Beam's pipeline options)`; a word that neither bilm nor Beam knows is a usage error."""
    parser = make_parser()
    args, rest = parser.parse_known_args(argv)
    unknown = _unknown_words(rest, set(PipelineOptions([]).get_all_options()))
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    check_model_arguments(parser, args)
    return args, PipelineOptions(rest)


def _unknown_words(words, beam_options):
    """The words that are neither a flag of Beam's pipeline options (`--name`, `--name=value`) nor a value after
    one."""
    unknown, after_flag = [], False
    for word in words:
        if word.startswith("--"):
            if word[2:].split("=", 1)[0] not in beam_options:
                unknown.append(word)
            after_flag = "=" not in word
        elif after_flag:
            after_flag = False
        else:
            unknown.append(word)
    return unknown


def check_model(args):
    """Before any work: a local model (directory, zip, options and weights) exists and holds a model (names, URLs
    and bucket paths are fetched by the workers), and a local --warm_up file exists."""
    if args.model is None:
        for path in (args.options_file, args.weight_file):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"Model file not found: {path} (--options_file and --weight_file are "
                                        "local files that every worker reads; give a bucket's zip as --model)")
    elif not is_url(args.model) and not is_bucket_path(args.model) and os.path.exists(args.model):
        locate_model(args.model, cache_dir=args.cache_dir, sha256=args.sha256)
    if args.warm_up is not None and not is_bucket_path(args.warm_up) and not os.path.isfile(args.warm_up):
        raise FileNotFoundError(f"Warm-up file not found: {args.warm_up}")


def run(argv=None, *, handle_signals=False):
    """Runs the pipeline; returns `{counter name: value}` of the `bilm` counters (see `EmbedFiles`).

    With `handle_signals` (the command does), SIGINT and SIGTERM end the
    process while the pipeline runs, with every worker process it started
    and what they were writing (`bilm.beam.stopping.stop_on_signals`), and
    FnApiRunner's worker processes leave those signals to it (`LocalRunner`).
    """
    args, pipeline_options = parse_arguments(argv)
    # This process's devices and arithmetic: where an in-memory runner (the default) embeds. Worker processes
    # (multi_processing, a remote runner) load the model in processes of their own: the handler sets TF32 there.
    set_numerics(tf32=args.tf32)
    announce_devices()
    check_model(args)
    shards = shard_outputs(args.input, args.output_dir, overwrite=args.overwrite)
    handler = ELMoModelHandler(args.model, options_file=args.options_file, weight_file=args.weight_file,
                               cache_dir=args.cache_dir, sha256=args.sha256, start=args.start,
                               warm_up=args.warm_up, kernel_dtype=args.kernel_dtype, tf32=args.tf32)
    outputs = [output for _, output in shards]
    # Beam's local scratch folder, which its `run` removes as it returns: a stop ends the process before.
    scratch = []

    def cleanup():
        remove_temporaries(outputs)
        for folder in scratch:
            shutil.rmtree(folder, ignore_errors=True)

    stopping = stop_on_signals(cleanup) if handle_signals else contextlib.nullcontext()
    with stopping:
        runner = LocalRunner() if handle_signals and _names_fn_api_runner(pipeline_options) else None
        pipeline = beam.Pipeline(runner=runner, options=pipeline_options)
        scratch.extend(filter(None, [getattr(pipeline, "local_tempdir", None)]))  # a Beam without one: nothing
        (pipeline
         | "Shards" >> beam.Create(shards)
         | "Embed" >> EmbedFiles(handler, args.output_format, use_sentence_keys=args.use_sentence_keys,
                                 overwrite=args.overwrite))
        result = pipeline.run()
        result.wait_until_finish()
    counters = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    totals = {}
    for counter in counters:
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + counter.committed
    return {"shards": len(shards), **totals}


def _names_fn_api_runner(pipeline_options):
    """Whether `--runner` is Beam's FnApiRunner (as Beam reads the name: any case, "Runner" optional)."""
    name = pipeline_options.view_as(StandardOptions).runner
    return isinstance(name, str) and name.lower().rsplit(".", 1)[-1] in ("fnapirunner", "fnapi")


def main(argv=None):
    with exit_on_user_error():
        totals = run(argv, handle_signals=True)
    print(f"{totals['shards']} shards: wrote {totals.get('shards_written', 0)} embedding files "
          f"({totals.get('sentences_written', 0)} sentence datasets); {totals.get('shards_complete', 0)} were "
          "complete already.")


if __name__ == "__main__":
    main()
