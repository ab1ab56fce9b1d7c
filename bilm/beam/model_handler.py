"""`ELMoModelHandler`: an ELMo model for Beam's RunInference."""
import hashlib
import json
import os

from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from bilm.beam.file_systems import fetch_model, is_bucket_path
from bilm.commands.devices import set_numerics
from bilm.errors import UserError
from bilm.io.formats.sentence_files import BULK_MAX_TOKENS
from bilm.models.embedding_settings import EmbeddingSettings
from bilm.pretrained import ELMo, load_with_settings
from bilm.text.whitespace import split_tokens
from bilm.utils.deprecation import deprecated_alias

LAYERS = ("average", "all", "top")
# RunInference gathers up to this many tokens a call; `ELMo.embed` then batches them by length.
DEFAULT_MAX_BATCH_TOKENS = 4 * BULK_MAX_TOKENS


class ELMoModelHandler(ModelHandler):
    """Loads an ELMo model and embeds batches of sentences, for `RunInference`.

    A sentence is a string (split on whitespace) or a list of tokens; its
    inference is what `ELMo.embed(sentences, layers)` gives it: float32
    `(n_tokens, 2P)`, or `(n_layers + 1, n_tokens, 2P)` for `layers="all"`,
    from the same start state and kernels. RunInference loads the model
    once per worker process and shares it between the process's threads
    (Beam's `shared.Shared`); batches hold up to `max_batch_tokens` tokens,
    which `embed` runs in calls of sentences of similar lengths.

    Args:
        model: what `bilm.load` opens (a directory, a `.zip`, its URL, a
            published model's name), or a `.zip` in a bucket that Beam's
            file systems read (`gs://...`, `s3://...`), copied once into
            `cache_dir` on each machine. Or leave it None and give
            `options_file` and `weight_file`.
        layers: `"average"`, `"all"`, `"top"` or a layer number, as in `ELMo.embed`.
        options_file, weight_file: the model as its two files, paths every
            worker can read.
        cache_dir, sha256, start, warm_up, kernel_dtype, mirror: as in
            `bilm.load` (`warm_up`: sentences, or a text file every worker
            can read; better, save a warm copy of the weights once with
            `ELMo.warm_up(..., save_to=...)`).
        matmul_dtype: deprecated, the old name of `kernel_dtype`.
        max_batch_tokens: the most tokens in one RunInference batch.
        tf32: None leaves each worker process's backend as it is; False
            turns TF32 off there when the model loads (float32 round-off on
            an Ampere or later NVIDIA GPU; `python -m bilm.beam` does unless
            `--tf32`), True turns it on. See docs/gpu.md.

    Example:
    ```python
    from apache_beam.ml.inference.base import RunInference
    results = sentences | RunInference(ELMoModelHandler("model_dir", layers="top"))
    # PredictionResult(example=sentence, inference=(n_tokens, 2P) float32)
    ```
    """

    def __init__(self, model=None, *, layers="average", options_file=None, weight_file=None, cache_dir=None,
                 sha256=None, start=None, warm_up=None, kernel_dtype=None, mirror=None,
                 max_batch_tokens=DEFAULT_MAX_BATCH_TOKENS, tf32=None, matmul_dtype=None):
        super().__init__()
        if (model is None) == (options_file is None or weight_file is None):
            raise UserError("Give the model either as model= (what bilm.load opens) or as options_file= and "
                            f"weight_file=. Received: model={model!r}, options_file={options_file!r}, "
                            f"weight_file={weight_file!r}")
        if not (layers in LAYERS or isinstance(layers, int) and not isinstance(layers, bool) and layers >= 0):
            raise UserError(f"layers must be 'average', 'all', 'top' or a layer number. Received: layers={layers!r}")
        if not isinstance(max_batch_tokens, int) or max_batch_tokens < 1:
            raise UserError(f"max_batch_tokens must be a positive integer. Received: {max_batch_tokens!r}")
        self.model = None if model is None else os.fspath(model)
        self.layers = layers
        self.options_file = None if options_file is None else os.fspath(options_file)
        self.weight_file = None if weight_file is None else os.fspath(weight_file)
        self.cache_dir = cache_dir
        self.sha256 = sha256
        # Sentences as lists of their own: the handler is pickled to every worker.
        self.settings = EmbeddingSettings.of(
            start=start, kernel_dtype=kernel_dtype, matmul_dtype=matmul_dtype, warm_up=(
                warm_up if warm_up is None or isinstance(warm_up, str) else
                [sentence if isinstance(sentence, str) else list(sentence) for sentence in warm_up]))
        self.mirror = mirror
        self.max_batch_tokens = max_batch_tokens
        if tf32 not in (None, True, False):
            raise UserError(f"tf32 must be None, True or False. Received: tf32={tf32!r}")
        self.tf32 = tf32

    def __repr__(self):
        return (f"ELMoModelHandler(model={self.model!r}, layers={self.layers!r}, options_file={self.options_file!r}, "
                f"weight_file={self.weight_file!r}, start={self.start!r}, kernel_dtype={self.kernel_dtype!r})")

    def model_tag(self):
        """A name for the model this handler loads: handlers that load the same model share one copy."""
        settings = [self.model, self.options_file, self.weight_file, self.cache_dir, self.sha256, self.start,
                    self.warm_up, self.kernel_dtype, self.mirror] + ([] if self.tf32 is None else [self.tf32])
        return "bilm-" + hashlib.sha256(json.dumps(settings).encode("utf-8")).hexdigest()[:16]

    def load_model(self):
        """The `ELMo` model (called once per worker process)."""
        if self.tf32 is not None:  # this worker's arithmetic, as the handler was asked
            set_numerics(tf32=self.tf32)
        if self.model is None:
            return ELMo.from_settings(self.options_file, self.weight_file, self.settings)
        model = fetch_model(self.model, self.cache_dir) if is_bucket_path(self.model) else self.model
        return load_with_settings(model, self.settings, cache_dir=self.cache_dir, sha256=self.sha256,
                                  mirror=self.mirror)

    @property
    def start(self):
        return self.settings.start

    @property
    def warm_up(self):
        return self.settings.warm_up

    @property
    def kernel_dtype(self):
        return self.settings.kernel_dtype

    matmul_dtype = deprecated_alias("matmul_dtype", "kernel_dtype")

    def run_inference(self, batch, model, inference_args=None):
        """`PredictionResult(sentence, vectors)` for each sentence of `batch`, in order."""
        vectors = model.embed(list(batch), layers=self.layers, verbose=0)
        return [PredictionResult(sentence, array) for sentence, array in zip(batch, vectors)]

    def get_num_bytes(self, batch):
        return sum(len(sentence) if isinstance(sentence, str) else sum(map(len, sentence)) for sentence in batch)

    def get_metrics_namespace(self):
        return "bilm"

    def batch_elements_kwargs(self):
        return {"min_batch_size": min(BULK_MAX_TOKENS, self.max_batch_tokens), "max_batch_size": self.max_batch_tokens,
                "element_size_fn": n_tokens}


def n_tokens(sentence):
    """A sentence's weight in a batch: its tokens (at least 1, so that empty sentences are counted too)."""
    return max(1, len(split_tokens(sentence) if isinstance(sentence, str) else sentence))

