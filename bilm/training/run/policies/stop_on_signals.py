"""Stopping a call of `train` on SIGINT or SIGTERM, every worker at the same step."""
from bilm.training.run.policies.policy import CONTINUE, Policy, interrupt
from bilm.training.run.stop_signals import StopSignals, agreed_signal


class StopOnSignals(Policy):
    """Stops the call when some worker received a signal (`StopSignals`), on every worker at the same step.

    Its flags are the signals' names: before each step, whether this
    worker received that signal; after it, whether any worker did. A
    signal agreed after a step interrupts the call there (`interrupt`:
    before the call's last step at once, at its last after its end); one
    that this worker received too late to be agreed (during the last step,
    or during the end of the call) interrupts at the call's end.
    """

    name = "stop_on_signals"
    flags = tuple(signum.name for signum in StopSignals.SIGNALS)

    def __init__(self, stop_signals):
        self.stop_signals = stop_signals

    @classmethod
    def from_context(cls, context):
        return cls(context.stop_signals)

    def requests(self):
        return {signum.name: self.stop_signals.received == signum for signum in StopSignals.SIGNALS}

    def after_step(self, run, step):
        requested = agreed_signal(self.stop_signals.received,
                                  [step.agreed[signum.name] for signum in StopSignals.SIGNALS])
        return CONTINUE if requested is None else interrupt(*requested)

    def on_run_end(self, run):
        received = self.stop_signals.received
        return CONTINUE if received is None else interrupt(received)
