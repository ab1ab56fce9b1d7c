"""The one interface between the training loop and its policies: the hooks, what they get, what they return.

A policy (`Policy`) is asked by the loop (`bilm.training.run.loop`), in
the order of `bilm.training.run.policies.POLICIES`:

- `on_run_start(run)`: once, right before the call's first step (not
  called when the call has no step to take);
- `after_step(run, step)`: after each step, with the step's `StepResult`;
  it returns an `Action` (continue, save, stop, or a stop by a signal);
- `on_run_end(run)`: once, after the call's end (the boundary state
  measured, the last checkpoint saved); it may return an interruption,
  which the call raises (`TrainingInterrupted`);
- `result()`: what the policy adds to `train`'s result dict.

Workers agree: a policy that decides from something only one worker sees
(a signal, its clock) declares flags by name (`flags`) and gives this
worker's values before each step (`requests`); the loop agrees every
policy's flags across workers in the step's one all-reduce, keyed by
policy and flag name (`FlagAgreement`), and gives each policy back its
own, by name, in `StepResult.agreed`: true on every worker at the same
step when any worker raised it.
"""
import dataclasses
import signal as signal_module
from typing import Any, Mapping, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class Action:
    """What a policy asks of the loop after a step (`after_step`) or at the call's end (`on_run_end`).

    The loop asks the policies in their order and combines their actions:
    - `save`: the step is saved before the next policy is asked (once,
      whoever asks);
    - `stop`: this step is the call's last: the later policies are still
      asked, then the call ends as at its last batch (the boundary state
      measured, a last checkpoint);
    - `interrupted_by`: `(signal.Signals, by_peer)`: stop because of a
      signal (`by_peer`: received by another worker). Before the call's last
      step the later policies are not asked, the step is saved and the call
      raises `TrainingInterrupted` at once; at its last step the call ends
      as usual first, then raises. Where several policies give one after
      a step, the last asked wins. At the call's end (`on_run_end`, every
      policy asked) an interruption of its last step comes first, then the
      policies' in their order.

    Use the constants `CONTINUE`, `SAVE`, `STOP` and `interrupt(...)`.
    """

    save: bool = False
    stop: bool = False
    interrupted_by: Optional[Tuple[signal_module.Signals, bool]] = None


CONTINUE = Action()
SAVE = Action(save=True)
STOP = Action(stop=True)


def interrupt(signal, by_peer=False):
    """The `Action` of a stop by `signal` (a `signal.Signals`; `by_peer`: another worker received it)."""
    return Action(interrupted_by=(signal, by_peer))


@dataclasses.dataclass(frozen=True)
class StepResult:
    """One step as the policies see it (after the run's step count and data position advanced).

    Attributes:
        step: optimizer steps taken by the run so far, this one included.
        loss: the step's training loss; `norm`: its gradient norm (both finite).
        seconds: the step's wall time.
        end_of_epoch: the step ended an epoch of the data stream; `epoch`: epochs completed.
        last: the call's last step (its batches are all trained on).
        agreed: the asked policy's own flags (`Policy.flags`) as the workers agreed them, by name.
    """

    step: int
    loss: float
    norm: float
    seconds: float
    end_of_epoch: bool
    epoch: int
    last: bool
    agreed: Mapping[str, bool] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class LoopContext:
    """What the policies are built from (`Policy.from_context`), once per call.

    Attributes:
        settings: the call's `LoopSettings`.
        training: the run's `TrainingSettings`.
        schedule: its `Schedule` (batches per epoch, the run's end, tokens per batch).
        save_timer: the `SaveTimer` every save resets.
        stop_signals: the call's `StopSignals` (its received signal; `interruptible()` phases).
        heldout_data: the held-out stream, or None.
    """

    settings: Any
    training: Any
    schedule: Any
    save_timer: Any
    stop_signals: Any
    heldout_data: Any = None


class Policy:
    """A policy of the training loop (see the module docstring); subclasses override what they need.

    Attributes:
        name: the policy's unique name, which keys its flags (`"<name>/<flag>"`).
        flags: the names of the flags this policy raises (`requests`) and reads back agreed
            (`StepResult.agreed`); the same on every worker.
    """

    name = None
    flags = ()

    @classmethod
    def from_context(cls, context):
        """The policy for one call, from its `LoopContext`."""
        return cls()

    def requests(self):
        """This worker's flags before a step: `{name: bool}` for each name of `flags`."""
        return {}

    def on_run_start(self, run):
        """Right before the call's first step."""

    def after_step(self, run, step):
        """After each step (`StepResult`): the `Action` to take."""
        return CONTINUE

    def on_run_end(self, run):
        """After the call's end (boundary state, last save): `CONTINUE`, or an interruption to raise."""
        return CONTINUE

    def result(self):
        """What this policy adds to `train`'s result dict."""
        return {}
