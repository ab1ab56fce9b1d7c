"""UserError: the one base class of the errors a user can fix, a ValueError; every error type of bilm is one."""
import importlib
import inspect
import pkgutil

import pytest

import bilm
from bilm.errors import UserError

# Every exception class bilm defines, and the built-in type each also is.
ERROR_TYPES = {
    "bilm.errors.UserError": ValueError,
    "bilm.options.keys.OptionsError": ValueError,
    "bilm.io.sources.model_cache.ModelFileError": ValueError,
    "bilm.io.sources.elmoformanylangs.ELMoForManyLangsError": ValueError,
    "bilm.io.sources.tf_hub_modules.TFHubModuleError": ValueError,
    "bilm.io.formats.tensorflow_checkpoint.TensorflowCheckpointError": ValueError,
    "bilm.training.convert.tensorflow_state.MissingOptionsError": ValueError,
    "bilm.io.formats.torch_pickle.TorchFileError": ValueError,
    "bilm.io.formats.output_files.OutputFileError": ValueError,
    "bilm.io.formats.output_files.OutputLockedError": ValueError,
    "bilm.io.formats.weight_file.WeightFileError": ValueError,
    "bilm.ops.native.build.BuildError": ValueError,
    "bilm.text.vocabulary.UnknownTokenError": KeyError,
    "bilm.training.model.adaptation.AdaptationError": ValueError,
    "bilm.training.run.run_checkpoint.CheckpointError": ValueError,
    "bilm.training.run.driver.NonFiniteLossError": FloatingPointError,
    "bilm.utils.start_up.MissingBackendError": ImportError,
}
# Not errors: training stopped by a signal, after saving (a BaseException, as KeyboardInterrupt is).
STOPS = {"bilm.training.run.stop_signals.TrainingInterrupted", "bilm.training.run.stop_signals.PhaseInterrupted",
         "bilm.commands.user_errors.Terminated", "bilm.utils.start_up.StoppedWhileStarting"}


def _defined_exception_types():
    found = {}
    for info in pkgutil.walk_packages(bilm.__path__, "bilm."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj
    return found


def test_a_user_error_is_a_value_error_with_its_message():
    error = UserError("options.json: 'n_epochs' must be an integer >= 1, got 0.")
    assert isinstance(error, ValueError) and str(error) == "options.json: 'n_epochs' must be an integer >= 1, got 0."
    with pytest.raises(ValueError, match="n_epochs"):  # callers that catch ValueError keep working
        raise error
    assert bilm.UserError is UserError


def test_every_error_type_of_the_library_is_a_user_error():
    found = _defined_exception_types()
    assert sorted(found) == sorted([*ERROR_TYPES, *STOPS])
    for name in STOPS:
        assert not issubclass(found.pop(name), Exception), name
    for name, error_type in found.items():
        assert issubclass(error_type, UserError), name
        assert issubclass(error_type, ERROR_TYPES[name]), name
