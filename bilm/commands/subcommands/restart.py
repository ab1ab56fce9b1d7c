"""Continues training from the latest checkpoint in --save_dir, optimizer state included.

On the same --train_prefix the data stream resumes where it stopped; on new
data (fine-tuning) it runs --n_epochs over it. With --tf1_checkpoint, an
original bilm-tf checkpoint is first converted into --save_dir.

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


def main(argv=None, prog=None):
    exit_unless_training_backend("Continuing a run (bin/restart.py)")
    parser = ScriptArgumentParser(prog=prog, description=__doc__)
    add_training_arguments(parser)
    parser.add_argument("--tf1_checkpoint", help="first convert this bilm-tf (TF1) checkpoint into --save_dir")
    parser.add_argument("--tf1_options_file", help="the options.json of --tf1_checkpoint")
    args = parser.parse_args(argv)
    if args.tf1_checkpoint and not args.tf1_options_file:
        parser.error("--tf1_checkpoint needs --tf1_options_file (the model's options.json).")

    def convert():
        if args.tf1_checkpoint:
            from bilm.training import convert_tf1_checkpoint

            path = convert_tf1_checkpoint(args.tf1_checkpoint, args.tf1_options_file, args.save_dir)
            print(f"Converted {args.tf1_checkpoint} to {path}")

    return run_training_script(args, restart=True, before=convert)

