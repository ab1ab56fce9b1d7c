"""The loop's policies: one registry, one interface. A policy added from a module of its own is built, asked
at each hook, reads back its own agreed flags by name, and the loop carries out its actions."""
import importlib
import signal

import pytest

from bilm.training.config.settings import training_settings
from bilm.training.run import driver, loop, policies
from bilm.training.run.policies import CONTINUE, SAVE, STOP, Policy, StepResult, interrupt
from bilm.training.run.run_checkpoint import read_file_meta
from training_helpers import checkpoint_numbers, open_data, tiny_options, write_corpus

# A policy as a user would add one: its module, and one entry in POLICIES. It raises its flag before
# steps 2 and 3, asks for a save after step 2 and ends the call after step 4.
RECORDING_MODULE = '''
from bilm.training.run.policies.policy import CONTINUE, SAVE, STOP, Policy

CALLS = []


class EveryOtherStep(Policy):
    name = "every_other_step"
    flags = ("odd", "asked")

    def __init__(self, checkpoint_every):
        self.checkpoint_every = checkpoint_every
        self.next_step = 1

    @classmethod
    def from_context(cls, context):
        CALLS.append(("built", context.settings.checkpoint_every))
        return cls(context.settings.checkpoint_every)

    def requests(self):
        return {"asked": self.next_step in (2, 3), "odd": self.next_step % 2 == 1}

    def on_run_start(self, run):
        CALLS.append(("start", run.current_step))

    def after_step(self, run, step):
        CALLS.append(("step", step.step, dict(step.agreed), step.last))
        self.next_step = step.step + 1
        return {2: SAVE, 4: STOP}.get(step.step, CONTINUE)

    def on_run_end(self, run):
        CALLS.append(("end", run.current_step))
        return CONTINUE

    def result(self):
        return {"every_other_step": len(CALLS)}
'''


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"), n_train=400, n_heldout=20)



@pytest.mark.slow
def test_a_policy_from_a_module_of_its_own_is_registered_by_one_line_and_the_loop_honours_it(
        tmp_path, corpus, monkeypatch):
    (tmp_path / "more_policies").mkdir()
    (tmp_path / "more_policies" / "every_other_step.py").write_text(RECORDING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "more_policies"))
    module = importlib.import_module("every_other_step")
    monkeypatch.setattr(policies, "POLICIES", (*policies.POLICIES, module.EveryOtherStep))

    options = tiny_options()
    save_dir = tmp_path / "ckpt"
    result = loop.train(options, open_data(options, corpus), 1, save_dir, None, max_steps=8, checkpoint_every=1000,
                        checkpoint_every_minutes=None, verbose=0)
    calls = module.CALLS
    assert calls[:2] == [("built", 1000), ("start", 0)]
    # Its own flags, by name, as agreed after each step (one worker: as raised).
    assert calls[2:6] == [("step", 1, {"odd": True, "asked": False}, False),
                          ("step", 2, {"odd": False, "asked": True}, False),
                          ("step", 3, {"odd": True, "asked": True}, False),
                          ("step", 4, {"odd": False, "asked": False}, False)]
    assert calls[6:] == [("end", 4)]
    # Its save after step 2, and the call ended after step 4 as at its end: boundary state, last checkpoint.
    assert result["step"] == result["steps_taken"] == 4 and not result["finished"]
    assert checkpoint_numbers(save_dir) == [2, 4] and result["checkpoint"] == str(save_dir / "checkpoint.npz")
    assert read_file_meta(result["checkpoint"])["n_boundary_starts"] > 0
    assert result["every_other_step"] == 7 and result["loss"] is not None


class _Run:
    """What `_after_step` uses of a `TrainingRun`: the step and its saves."""

    def __init__(self, step):
        self.current_step, self.last_saved, self.saves = step, None, 0

    def save(self):
        self.saves += 1
        self.last_saved = self.current_step


class _Says(Policy):
    def __init__(self, name, action, asked):
        self.name, self.action, self.asked = name, action, asked

    def after_step(self, run, step):
        self.asked.append((self.name, step.last, run.saves))
        return self.action


def _after_step(actions, last=False):
    asked, run = [], _Run(5)
    call_policies = [_Says(f"p{i}", action, asked) for i, action in enumerate(actions)]
    step = StepResult(5, 1.0, 0.5, 0.1, False, 0, last)
    ended, interruption = driver._after_step(run, step, call_policies, {p.name: {} for p in call_policies})
    return ended, interruption, asked, run.saves


def test_the_loop_combines_the_actions_in_the_policies_order():
    # A save happens once, before the next policy is asked.
    assert _after_step([SAVE, SAVE, CONTINUE]) == (False, None, [("p0", False, 0), ("p1", False, 1),
                                                                 ("p2", False, 1)], 1)
    # A stop ends the call after this step; the later policies see it as the last.
    assert _after_step([STOP, CONTINUE]) == (True, None, [("p0", False, 0), ("p1", True, 0)], 0)
    # A signal before the call's last step: nothing else happens after the step.
    sigterm = interrupt(signal.SIGTERM, True)
    assert _after_step([sigterm, SAVE]) == (False, (signal.SIGTERM, True), [("p0", False, 0)], 0)
    # At its last step the others still act, then the call ends as usual; the last interruption asked wins.
    assert _after_step([sigterm, SAVE, interrupt(signal.SIGINT)], last=True) == (
        True, (signal.SIGINT, False), [("p0", True, 0), ("p1", True, 0), ("p2", True, 1)], 1)


def test_the_registered_policies_have_unique_names_and_declared_flags():
    settings = training_settings(tiny_options())[1]
    built = policies.make_policies(policies.LoopContext(loop.LoopSettings(), settings, None, None, None))
    assert [type(p) for p in built] == list(policies.POLICIES)
    assert len({p.name for p in built}) == len(built) and all(isinstance(p.flags, tuple) for p in built)


def test_the_action_constants():
    assert CONTINUE == policies.Action() and SAVE.save and STOP.stop and not STOP.save
    assert interrupt(signal.SIGINT) == policies.Action(interrupted_by=(signal.SIGINT, False))
