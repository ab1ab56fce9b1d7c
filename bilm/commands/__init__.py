"""The building blocks of the `bin/` scripts, public so that a script of your own can reuse them: the argument
parser whose mistakes are one line (`ScriptArgumentParser`), the flags of the embedding and training scripts,
`exit_on_user_error` (one `Error:` line and exit status 1 for a mistake a user can fix; 130/143 on
signals), and the device line and float32 switches every script sets first (`announce_devices`,
`set_numerics`); `subcommand_main`, a command of the `bilm` command as a function (what each script runs).

Each name is imported when first used, so that a script loads only what it needs.
"""
from bilm.utils.lazy_names import lazy_names

_MODULES = {
    "ScriptArgumentParser": "argument_parser",
    "non_negative_int": "argument_parser",
    "positive_float": "argument_parser",
    "positive_int": "argument_parser",
    "rate": "argument_parser",
    "add_embedding_run_arguments": "embedding_arguments",
    "add_model_arguments": "embedding_arguments",
    "add_output_format_arguments": "embedding_arguments",
    "add_start_arguments": "embedding_arguments",
    "check_model_arguments": "embedding_arguments",
    "model_files": "embedding_arguments",
    "add_tf32_argument": "devices",
    "announce_devices": "devices",
    "describe_devices": "devices",
    "missing_gpus_warning": "devices",
    "set_numerics": "devices",
    "add_training_arguments": "training_arguments",
    "describe_result": "training_arguments",
    "restart_command": "training_arguments",
    "run_training_script": "training_arguments",
    "train_from_args": "training_arguments",
    "subcommand_main": "cli",
    "exit_on_user_error": "user_errors",
    "exit_unless_tensorflow": "user_errors",
    "exit_unless_training_backend": "user_errors",
}

__all__ = sorted(_MODULES)

__getattr__, __dir__ = lazy_names(__name__, _MODULES)
