"""The one training loop, on every backend: a call's steps, each followed by the registered policies
(`bilm.training.run.policies`: the progress line, a stop on signals, the periodic saves, the held-out
evaluation), whose `Action`s it carries out; then the boundary state and the last save.

The trainer supplies the run (`BaseRun`: `ArrayTrainingRun`, on every backend) and the step function; this
module imports no backend.
"""
import dataclasses
import math
import time

import keras
import numpy as np

from bilm.errors import UserError
from bilm.training.run.policies.flag_agreement import FlagAgreement
from bilm.training.run.policies.policy import StepResult
from bilm.training.run.stop_signals import PhaseInterrupted

__all__ = ["NonFiniteLossError", "check_dtype_policy", "run_steps"]


class NonFiniteLossError(UserError, FloatingPointError):
    """The training loss or gradient norm became NaN or infinite (the message
    says at which step and what to change)."""


def check_dtype_policy():
    """Refuses a global Keras dtype policy other than float32 before any work: the training network
    computes in float32, bfloat16 products are the training key `matmul_dtype`."""
    policy = keras.mixed_precision.dtype_policy()
    if policy.compute_dtype != "float32" or policy.variable_dtype != "float32":
        raise UserError(
            f"bilm's training computes in float32, and the global Keras dtype policy is {policy.name!r}. Set "
            "keras.mixed_precision.set_global_policy('float32') before training; for bfloat16 products with "
            "float32 weights and accumulation, use the training key matmul_dtype 'bfloat16' "
            "(bin/train_elmo.py --matmul_dtype bfloat16).")


def run_steps(run, step_fn, batches, data, schedule, max_steps, call_policies, stop_signals):
    """A call's steps and its end, on any backend: the steps from the batches consumed to the call's end, each
    followed by the policies, then the boundary state and the last save.

    Args:
        run: the call's run (`TrainingRun` on TensorFlow; `bilm.training.arrays.training_run.ArrayTrainingRun`):
            its step count, data position, saves, messages and scalars.
        step_fn: `(batch, step, requests) -> {"loss", "norm", "requests"}`, one training step (`requests`:
            the policies' flags, `FlagAgreement`; `"requests"` the flags agreed by the workers).
        batches: `skip -> iterable` of the stream's batches after the first `skip`.
        data: the training stream (the boundary state is measured on its text).
        schedule: the run's `Schedule`; `max_steps`: the call's step bound (None: the run's end).
        call_policies: the call's policies (`policies.make_policies`); `stop_signals`: its `StopSignals`.

    Returns:
        `train`'s result dict.

    Raises:
        NonFiniteLossError; TrainingInterrupted (after saving what the call reached).
    """
    stop_at = schedule.stop_at(run.consumed, run.current_step, max_steps)
    started = time.perf_counter()
    try:
        steps_taken, interruption, ended = _take_steps(run, step_fn, batches, schedule, stop_at, call_policies)
    finally:
        run.close_progress()
    if interruption is not None and not ended:
        raise run.stop(*interruption)  # saves without the call's end
    _end_call(run, data, stop_signals, steps_taken)
    at_end = [policy.on_run_end(run).interrupted_by for policy in call_policies]
    interruption = interruption or next((signal for signal in at_end if signal is not None), None)
    if interruption is not None:
        raise run.stop(*interruption)
    run.close()
    result = {}
    for policy in call_policies:
        result.update(policy.result())
    seconds = time.perf_counter() - started
    result.update(step=run.current_step, checkpoint=run.checkpoint_path(), seconds=seconds, steps_taken=steps_taken,
                  finished=schedule.finished(run.consumed, run.current_step), n_epochs=run.settings.n_epochs,
                  tokens_per_second=steps_taken * schedule.tokens_per_batch / max(seconds, 1e-9))
    return result


def _take_steps(run, step_fn, batches, schedule, stop_at, call_policies):
    """The call's steps, from the batches consumed to `stop_at`, each followed by the policies.

    Returns:
        `(steps taken, interruption, ended)`: `interruption` is the
        `(signal, by_peer)` a policy stopped the call with (None: none);
        `ended`: the steps reached the call's end (its last batch, or a
        policy's `STOP`), which then ends as usual.
    """
    if run.consumed >= stop_at:
        return 0, None, True
    batches = batches(run.consumed)
    agreement = FlagAgreement(call_policies)
    for policy in call_policies:
        policy.on_run_start(run)
    steps = 0
    for batch in batches:
        started = time.perf_counter()
        requests = agreement.requests()
        outputs = step_fn(batch, run.current_step, requests or None)
        loss, norm = float(outputs["loss"]), float(outputs["norm"])
        if not (math.isfinite(loss) and math.isfinite(norm)):
            raise NonFiniteLossError(_non_finite_message(run, loss, norm))
        run.advance()
        steps += 1
        agreed = agreement.agreed(np.asarray(outputs["requests"]) if "requests" in outputs else None)
        step = StepResult(run.current_step, loss, norm, time.perf_counter() - started,
                          end_of_epoch=run.consumed % schedule.batches_per_epoch == 0,
                          epoch=run.consumed // schedule.batches_per_epoch, last=run.consumed >= stop_at)
        ended, interruption = _after_step(run, step, call_policies, agreed)
        if ended or interruption is not None:
            return steps, interruption, ended
    return steps, None, True


def _after_step(run, step, call_policies, agreed):
    """Asks the policies about `step` and carries out their actions (see `Action`); returns `(ended,
    interruption)`."""
    ended, interruption = step.last, None
    for policy in call_policies:
        action = policy.after_step(run, dataclasses.replace(step, last=ended, agreed=agreed[policy.name]))
        if action.save and run.last_saved != run.current_step:
            run.save()
        ended = ended or action.stop
        if action.interrupted_by is not None:
            interruption = action.interrupted_by
            if not ended:
                break  # stops at once: nothing else happens after the step
    return ended, interruption


def _end_call(run, data, stop_signals, steps_taken):
    """At a call's end: the boundary state and the last save. A signal during the last step waits for them; one
    during the measure stops it (the checkpoint then keeps the boundary state it had), or where the backend's
    phases are not interruptible (JAX), stops the call once the measure is saved."""
    if steps_taken or not run.has_boundary_state():
        received_before = stop_signals.received
        run.report("Measuring the boundary state on the training text (a forward pass over its first sentences)...")
        try:
            with stop_signals.interruptible():
                n_starts = run.measure_boundary_state(data)
            # Where phases are not interruptible (JAX), a signal during the measure stops the call once it is saved.
            during_measure = received_before is None and stop_signals.received is not None
            run.report(f"Boundary state: the mean LSTM state at {n_starts:,} sentence starts of the training "
                       "text (where embedding starts each sentence; see bilm.models.boundary_state).")
        except PhaseInterrupted as interrupted:
            run.report(f"{interrupted.signal.name}: the boundary state was not measured (the checkpoint keeps the "
                       "one it had, if any; a restart that trains measures it).")
            raise run.stop(interrupted.signal, False) from None
        run.save()
        if during_measure:
            raise run.stop(stop_signals.received, False, phase="measuring the boundary state")
    elif run.last_saved_checkpoint() is None:
        run.save()


def _non_finite_message(run, loss, norm):
    last_good = run.last_saved_checkpoint() or run.restored_from
    if last_good:
        advice = f"the last good checkpoint is {last_good}; restart from it"
    else:
        advice = "no checkpoint was saved before it; train again"
    return (f"Training stopped at step {run.current_step + 1}: the loss is {loss} and the gradient norm {norm}. "
            f"No weight was changed by that step and nothing was saved after it; {advice} with a lower "
            "learning_rate or all_clip_norm_val.")
