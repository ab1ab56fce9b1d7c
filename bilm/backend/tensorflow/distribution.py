"""Which `tf.distribute` strategy trains the biLM, and which worker writes the files."""
import json
import os

import tensorflow as tf

from bilm.errors import UserError


def make_strategy(n_gpus=1):
    """The distribution strategy for `n_gpus` on this machine, or for a cluster.

    A `TF_CONFIG` naming more than one worker gives a
    `MultiWorkerMirroredStrategy` (every worker must run the same command);
    otherwise `n_gpus > 1` gives a `MirroredStrategy` over the first
    `n_gpus` GPUs, and one GPU (or none) the default strategy.
    """
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    if sum(len(tasks) for role, tasks in cluster.items() if role in ("chief", "worker")) > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    if n_gpus > 1:
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) < n_gpus:
            raise UserError(f"n_gpus={n_gpus} but this machine shows {len(gpus)} GPU(s): {[g.name for g in gpus]}.")
        return tf.distribute.MirroredStrategy([gpu.name for gpu in gpus[:n_gpus]])
    return tf.distribute.get_strategy()


def is_chief(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def n_workers(strategy):
    """How many machines (chief and workers) train together: 1 without a cluster."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return 1
    spec = resolver.cluster_spec().as_dict()
    return max(1, sum(len(spec.get(role, [])) for role in ("chief", "worker")))
