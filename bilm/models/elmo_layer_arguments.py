"""`ELMoEmbedding`'s constructor arguments: their checks (each bad one ends in one `UserError` that names it) and
the Keras config that holds them (`LayerArguments`), so that a `.keras` archive rebuilds the layer."""
from bilm.errors import UserError
from bilm.models.elmo_outputs import check_output
from bilm.models.embedding_settings import check_start, checked_kernel_dtype
from bilm.models.text_inputs import INPUT_TYPES


def check_layer_arguments(options, *, output, input_type, dropout, max_batch_size, start, kernel_dtype,
                          matmul_dtype, trainable_bilm, n_token_vocab):
    """The layer's kernel dtype (`kernel_dtype`, or its old name `matmul_dtype`; None: `"float32"`), once every
    argument is checked against `options` (`BiLMOptions` in their prediction form)."""
    check_output(output, options.n_layers)
    if input_type not in INPUT_TYPES:
        raise UserError(f"input_type must be one of {INPUT_TYPES}. Received: input_type={input_type!r}")
    if not 0.0 <= dropout < 1.0:
        raise UserError(f"dropout must be in [0, 1). Received: dropout={dropout}")
    if max_batch_size is not None and max_batch_size < 1:
        raise UserError(f"max_batch_size must be >= 1 or None. Received: max_batch_size={max_batch_size}")
    check_start(start, may_be_none=False)
    kernel_dtype = checked_kernel_dtype(kernel_dtype, matmul_dtype)
    if trainable_bilm and kernel_dtype != "float32":
        raise UserError(f"trainable_bilm=True fine-tunes the biLM, which needs float32 kernels. Received: "
                        f"kernel_dtype={kernel_dtype!r}; pass kernel_dtype='float32' to fine-tune.")
    if options.char_cnn is None and n_token_vocab is None:
        raise UserError(f"{options.source}: the options have no 'char_cnn' section, so this is a token-input biLM: "
                        "pass n_token_vocab= (or use ELMoEmbedding.from_files(..., embedding_weight_file=...)).")
    return kernel_dtype


# Constructor arguments that the layer keeps under their own names; options, output and mix are stored otherwise.
_CONFIG_ATTRIBUTES = ("mix_seed", "trainable_mix", "trainable_bilm", "do_layer_norm", "l2_coef", "use_top_only",
                      "dropout", "input_type", "max_batch_size", "n_token_vocab", "vocabulary", "start",
                      "kernel_dtype")


class LayerArguments:
    """`get_config` and `from_config` of `ELMoEmbedding` (a mixin before `keras.layers.Layer`): every constructor
    argument, with `options` as a dict, `output` (`output_key`) and `mix` (the mix layer's kind)."""

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in _CONFIG_ATTRIBUTES})
        config.update({"options": self.options.to_dict(), "output": self.output_key, "mix": self.mix.mix})
        return config

    @classmethod
    def from_config(cls, config):
        """The layer of `get_config`'s dict; a config of a `.keras` file written
        before `matmul_dtype` was renamed `kernel_dtype` loads as it did."""
        if "matmul_dtype" in config:
            config = {**config}
            config.setdefault("kernel_dtype", config.pop("matmul_dtype"))
        return super().from_config(config)
