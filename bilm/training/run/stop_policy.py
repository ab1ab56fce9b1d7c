"""When one call of `train` stops: at its last batch, or at the step where a signal reached any worker."""
from bilm.training.run.stop_signals import agreed_signal


class StopPolicy:
    """Decides after each step whether the call stops, and why.

    The call ends at `stop_at` batches of the data stream (the run's end,
    or `max_steps` batches on). A signal (`StopSignals`) stops it early,
    every worker at the same step: the loop passes `requests()` (this
    worker's signal flags) through the step's all-reduce and gives the
    agreed flags to `agree`.

    Attributes:
        requested: `(signal.Signals, by_peer)` once some worker received a
            signal (`by_peer`: not this one), else None.
    """

    def __init__(self, stop_signals, stop_at):
        self.stop_signals = stop_signals
        self.stop_at = stop_at
        self.requested = None

    def requests(self):
        """This worker's flags for the step's all-reduce: one per signal of `StopSignals.SIGNALS`."""
        return self.stop_signals.flags()

    def agree(self, agreed):
        """Takes the agreed flags of `requests()` (true: some worker raised it)."""
        self.requested = agreed_signal(self.stop_signals.received, agreed)

    def interrupted(self, received):
        """A signal stopped a phase between steps (held-out evaluation) on this worker."""
        self.requested = received, False

    def reached_end(self, consumed):
        """Whether `consumed` batches of the stream are all this call trains on."""
        return consumed >= self.stop_at

    def stops_early(self, consumed):
        """Whether a signal stops the call before its end (then nothing else happens after the step)."""
        return self.requested is not None and not self.reached_end(consumed)

    def signal_at_end(self):
        """At the call's end: the signal to stop with (one agreed, or one this worker got since), else None."""
        if self.requested is None and self.stop_signals.received is not None:
            self.requested = self.stop_signals.received, False
        return self.requested
