"""The start-of-training summary: the parameters, the big memory items, how long the run is, and what the
progress line's perplexity is."""
from bilm.optimizers import OPTIMIZERS


def perplexity_label(settings):
    """What the progress line calls its perplexity: of the sampled softmax, or of the full one."""
    return "sampled-softmax perplexity" if settings.sample_softmax else "training perplexity"


def describe_run(report, lm, options, settings, n_replicas, schedule):
    """The start-of-training summary: parameters, the big memory items, how long the run is."""
    n_bilm, n_softmax = lm.parameter_counts()
    mib = 4.0 / 2 ** 20
    samples = settings.n_negative_samples_batch if settings.sample_softmax else settings.n_tokens_vocab
    logits = len(lm.directions) * settings.batch_size * settings.unroll_steps * (samples + 1)
    report(f"Parameters: {n_bilm:,} in the biLM, {n_softmax:,} in the softmax, {n_bilm + n_softmax:,} in all.")
    slots = OPTIMIZERS[settings.optimizer].slots_per_variable
    report(f"Memory estimate per replica (float32): softmax {n_softmax * mib:,.1f} MiB, {settings.optimizer} "
        f"state {slots * (n_bilm + n_softmax) * mib:,.1f} MiB, softmax logits {logits * mib:,.1f} MiB per step.")
    epochs = (f"{settings.n_epochs} epoch(s)" if "n_epochs" in options.raw
              else f"{settings.n_epochs} epochs (the default n_epochs; --n_epochs or --max_steps to change)")
    bound = f", at most {settings.max_steps:,} steps in all (max_steps)" if settings.max_steps else ""
    report(f"{n_replicas} replica(s) x {settings.batch_size} rows x {settings.unroll_steps} steps; "
        f"{schedule.batches_per_epoch} batches per epoch, {epochs}: {schedule.batches_total} batches{bound}.")
    if settings.matmul_dtype != "float32":
        report(f"The large matmuls (highway, LSTM input half, softmax) take {settings.matmul_dtype} operands "
            "in training steps (matmul_dtype); weights, optimizer, recurrence and evaluation stay float32.")


def describe_warmup(report, settings, current_step):
    """Says when the first steps train the softmax alone (`softmax_warmup_steps`)."""
    if current_step < settings.softmax_warmup_steps:
        first = ("The first step of the run trains" if settings.softmax_warmup_steps == 1 else
                 f"The first {settings.softmax_warmup_steps:,} steps of the run train")
        report(f"{first} the softmax alone, the biLM frozen (softmax_warmup_steps; {current_step:,} taken).")


def describe_progress_line(report, settings):
    """Says what the progress line's perplexity is: not the held-out one (before the first step)."""
    report(f"The progress line's {perplexity_label(settings)} is exp(training loss) over the last batches"
           + (f" ({settings.n_negative_samples_batch:,} sampled negatives" if settings.sample_softmax else " (")
           + (", dropout on)" if settings.dropout else ")")
           + ": not comparable with the held-out perplexity of --heldout_prefix and run_test.py (full "
           "softmax, no dropout).")
