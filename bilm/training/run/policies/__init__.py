"""The training loop's policies, registered in one place: `POLICIES`.

Each policy is one module here with one `Policy` subclass (the interface:
`bilm.training.run.policies.policy`). Adding a policy is adding its module
and one entry to `POLICIES`; the loop builds every registered policy for
each call (`make_policies`) and asks them in this order after each step:
the progress line first (it reports the step), then a stop by a signal
(which, before the call's last step, skips the others), then the periodic
save, then the held-out evaluation (which sees the step saved).
"""
from bilm.training.run.policies.checkpoint_policy import CheckpointPolicy
from bilm.training.run.policies.heldout_evaluation import HeldoutEvaluation
from bilm.training.run.policies.policy import (
    CONTINUE,
    SAVE,
    STOP,
    Action,
    LoopContext,
    Policy,
    StepResult,
    interrupt,
)
from bilm.training.run.policies.progress_report import ProgressReport
from bilm.training.run.policies.stop_on_signals import StopOnSignals

POLICIES = (
    ProgressReport,
    StopOnSignals,
    CheckpointPolicy,
    HeldoutEvaluation,
)


def make_policies(context):
    """One instance of each registered policy (`POLICIES`, read at the call) for a call's `LoopContext`."""
    return [policy.from_context(context) for policy in POLICIES]


__all__ = ["CONTINUE", "POLICIES", "SAVE", "STOP", "Action", "CheckpointPolicy", "HeldoutEvaluation", "LoopContext",
           "Policy", "ProgressReport", "StepResult", "StopOnSignals", "interrupt", "make_policies"]
