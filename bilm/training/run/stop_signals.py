"""SIGINT and SIGTERM during a training run: save what can be saved, then stop (`TrainingInterrupted`)."""
import contextlib
import signal
import threading


class TrainingInterrupted(BaseException):
    """SIGINT or SIGTERM stopped `train(..., save_on_signals=True)`; the step it had reached is saved.

    A `BaseException`, like `KeyboardInterrupt`, so that an `except
    Exception` on the way up does not swallow a request to stop.

    Attributes:
        signal: the `signal.Signals` received (by another worker when
            `by_peer`: every worker of a cluster stops at the same step).
        step: the optimizer steps taken, all of them in `checkpoint`.
        checkpoint: the checkpoint prefix that continues the run exactly
            (`train(..., restart_ckpt_file=checkpoint)` on the same data),
            or None when the signal came before the run's first checkpoint
            (`phase` says during what): nothing was kept, the run starts
            over when given again.
        exit_status: `128 + signal number` (130 for SIGINT, 143 for
            SIGTERM), what a shell reports for a process the signal ended.
        continue_with: how to continue, for the message.
        phase: what the run was doing when the signal came, if not a step
            (e.g. "fitting the new softmax").
    """

    def __init__(self, signal, step, checkpoint, *, by_peer=False, continue_with=None, phase=None):
        self.signal = signal
        self.step = step
        self.checkpoint = checkpoint
        self.by_peer = by_peer
        self.phase = phase
        self.exit_status = 128 + int(signal)
        received = f"{signal.name} (received by another worker)" if by_peer else signal.name
        during = f" while {phase}" if phase else ""
        if checkpoint is None:
            self.continue_with = continue_with or "the same call again"
            message = (f"Stopped by {received}{during}, before the run's first checkpoint: nothing was kept. "
                       f"Start over with: {self.continue_with}")
        else:
            self.continue_with = continue_with or (
                f"train(..., restart_ckpt_file={checkpoint!r}) on the same data")
            message = (f"Stopped by {received}{during} after step {step}: saved {checkpoint}. "
                       f"Continue with: {self.continue_with}")
        super().__init__(message)


class PhaseInterrupted(BaseException):
    """Raised inside `StopSignals.interruptible()` when a signal arrives; `signal` says which."""

    def __init__(self, signum):
        super().__init__(signum.name)
        self.signal = signum


class StopSignals:
    """While active (a context manager), SIGINT and SIGTERM ask the run to stop instead of raising.

    The handlers record the first signal in `received`. During steps and
    saves the loop sees it between steps, saves and raises
    `TrainingInterrupted`; later signals are ignored, so that a second
    Ctrl-C cannot abort a save half-way (checkpoints are written under
    temporary names and listed only once complete, so a `kill -9` cannot
    corrupt one either: it loses the save). Inside `interruptible()` (the
    phases between steps whose work can be dropped: fitting a softmax,
    measuring the boundary state, evaluating) a signal raises
    `PhaseInterrupted` at once, so that the run stops promptly there too.
    On exit the previous handlers are put back. Disabled, it does nothing.

    Not `tf.distribute.experimental.PreemptionCheckpointHandler`: that one
    restores the newest checkpoint of the directory when it is created and
    adds its own counter to the checkpoint (`train` restores the one it is
    given, tolerating new data and another batch size); it replaces the
    SIGTERM handler for good and ignores SIGINT; and it depends on where it
    runs: it asks the GCE metadata server (up to 5 s) whether it is on
    Google Cloud, does nothing on a GCE CPU machine, and by default exits
    the process with status 42. Its one service a cluster needs, every
    worker stopping at the same step, `TrainStep` gives by averaging each
    worker's flags in the all-reduce each step makes anyway.

    Args:
        enabled: install the handlers (else everything here does nothing).
        interruptible_phases: whether `interruptible()` may raise (False
            with several workers, which must agree on the step they stop at:
            there a signal waits for the next step).
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, enabled, interruptible_phases=True):
        self.enabled = enabled
        self.interruptible_phases = interruptible_phases
        self.received = None
        self._previous = {}
        self._in_phase = False

    @staticmethod
    def check_main_thread():
        """Python runs signal handlers in the main thread only, so only there can they be installed."""
        if threading.current_thread() is not threading.main_thread():
            raise ValueError(
                "save_on_signals=True needs the main thread (Python handles signals there); this train() call "
                f"runs in thread {threading.current_thread().name!r}. Pass save_on_signals=False.")

    def __enter__(self):
        if self.enabled:
            self.check_main_thread()
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._record)
        return self

    def __exit__(self, *exc_info):
        for signum, handler in self._previous.items():
            # None: the previous handler was not installed from Python; the default is the best guess.
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self._previous = {}

    def _record(self, signum, frame):
        signum = signal.Signals(signum)
        if self.received is None:
            self.received = signum
        if self._in_phase:
            self._in_phase = False  # raised once: the code that catches it runs undisturbed
            raise PhaseInterrupted(signum)

    @contextlib.contextmanager
    def interruptible(self):
        """A block whose work a signal that arrives during it drops (`PhaseInterrupted`).

        A signal received before the block (during the last step) does not
        stop it: the loop has already decided what that signal means.
        """
        self._in_phase = self.enabled and self.interruptible_phases
        try:
            yield
        finally:
            self._in_phase = False

    def flags(self):
        """This process's requests as 0/1 flags, one per signal of `SIGNALS`."""
        return [float(self.received == signum) for signum in self.SIGNALS]


def agreed_signal(received, signal_flags):
    """`(signal, by_peer)` when some worker received one of `StopSignals.SIGNALS` (its flag is up), else None.

    The signal is this process's own if it has one, else (another worker's)
    SIGTERM before SIGINT: a preemption outranks a keyboard.
    """
    raised = [signum for signum, up in zip(StopSignals.SIGNALS, signal_flags) if up]
    if not raised:
        return None
    if received in raised:
        return received, False
    return max(raised), True
