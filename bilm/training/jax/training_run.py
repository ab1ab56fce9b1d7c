"""What one call of training on JAX holds, as the one training loop (`bilm.training.run.loop.run_steps`) and
its policies drive it: the state of `JaxTrainStep`, its checkpoints in `save_dir` (`bilm.training.run.run_checkpoint`)
and the held-out evaluation; messages, the progress line and TensorBoard's scalars are `BaseRun`'s.

Needs Keras on JAX or PyTorch (`KERAS_BACKEND=jax` or `torch`).
"""
from bilm.training.jax.boundary_state_measure import measure_boundary_state
from bilm.training.jax.evaluation import heldout_perplexity
from bilm.training.run.base_run import BaseRun
from bilm.training.run.stop_signals import PhaseInterrupted


class JaxTrainingRun(BaseRun):
    """A call's run on JAX and PyTorch: the state its steps replace.

    Args:
        train_step: the run's `JaxTrainStep`; `state` its state (placed on its devices).
        boundary_state: the boundary state the run's checkpoint holds (None: none yet).
        stop_signals: the call's `StopSignals`: a signal stops the held-out evaluation between its batches.
        restored_from: the checkpoint the call continues (None: a new run).
        run: `BaseRun`'s keyword arguments (`save_dir`, `options`, `seed`, `taken`, `consumed`, ...).
    """

    def __init__(self, train_step, state, *, boundary_state, stop_signals, restored_from, log_dir, verbose, save_timer,
                 **run):
        super().__init__(train_step.settings, log_dir, verbose, save_timer, **run)
        self.train_step = train_step
        self.state = state
        self.boundary_state = boundary_state
        self.stop_signals = stop_signals
        self.restored_from = restored_from

    def take_step(self, batch, step, requests):
        """One training step (the loop's `step_fn`): the state moves on; `{"loss", "norm", "requests"}` (one
        process: its own flags are the agreed ones)."""
        self.state, metrics = self.train_step(self.state, batch, step)
        return {"loss": metrics["loss"], "norm": metrics["norm"], "requests": requests or []}

    def state_arrays(self):
        return self.state

    def boundary_state_arrays(self):
        return self.boundary_state

    def has_boundary_state(self):
        return self.boundary_state is not None

    def measure_boundary_state(self, data):
        """Measures the boundary state on `data`'s text (the next checkpoint holds it); returns the starts read."""
        self.boundary_state = measure_boundary_state(self.train_step, self.state, data)
        return self.boundary_state[1]

    def heldout(self, data, batch_size, tag):
        """Held-out perplexity with `batch_size` rows (None when there is no held-out data); a signal stops it
        between its batches (`PhaseInterrupted`), never inside one of JAX's calls."""
        if data is None:
            return None

        def between_batches():
            if self.stop_signals.received is not None:
                raise PhaseInterrupted(self.stop_signals.received)

        perplexity = heldout_perplexity(self.train_step, self.state, data, batch_size, between_batches)
        self.report(f"{tag}: held-out perplexity {perplexity:.3f}")
        self.scalars({"heldout_perplexity": perplexity})
        return perplexity
