"""`ELMoEmbedding`: a pretrained biLM and the mix of its layers as one Keras layer."""

import keras
import numpy as np
from keras import ops

from bilm.backend.direct_call import direct_call
from bilm.errors import UserError
from bilm.io.formats.weight_file import WeightFileError
from bilm.layers.initializers import Filled
from bilm.layers.layer_mix import WeightLayers
from bilm.models.elmo_embedding_files import elmo_embedding_from_files
from bilm.models.elmo_inputs import ELMoInputs
from bilm.models.elmo_layer_arguments import LayerArguments, check_layer_arguments
from bilm.models.elmo_outputs import elmo_outputs, named_outputs
from bilm.models.functional_bilm import build_bilm, state_keys
from bilm.models.id_checks import check_rows
from bilm.models.network_dtype import FLOAT32, float32_policy
from bilm.models.text_inputs import TEXT_INPUT_TYPES, compiling_text_with_xla
from bilm.options import load_options
from bilm.utils.deprecation import deprecated_alias, renamed_argument


@keras.saving.register_keras_serializable(package="bilm")
class ELMoEmbedding(ELMoInputs, LayerArguments, keras.layers.Layer):
    """ELMo representations of text from a pretrained biLM, as one Keras layer.

    The biLM is `build_bilm`'s functional model, `network`, run *stateless*: every
    sentence starts from the same LSTM state (`start`), so outputs are
    deterministic and do not depend on the other rows or on earlier batches.
    Its layers are combined by a `WeightLayers` mix (`mix`). By default only the
    mix trains; the biLM is frozen.

    The constructor builds the architecture that `options` describe, with
    random biLM weights; its arguments are the layer's whole config, so a
    `.keras` archive rebuilds it anywhere and restores every weight.
    `ELMoEmbedding.from_files(options_file, weight_file, ...)` builds one
    and loads a weight file (and the start state) into it.

    Args:
        options: the biLM's options (a dict, `BiLMOptions` or an
            `options.json` path), turned into their prediction form.
        output: which output the layer returns (TF-Hub ELMo names):
            `"word_emb"` `(batch, time, P)`, the context-free token
            encodings (layer 0); `"lstm_outputs1"`, `"lstm_outputs2"`, ...
            `(batch, time, 2P)`, `[forward, backward]` of each LSTM layer;
            `"elmo"` `(batch, time, 2P)`, the layers combined by `mix`;
            `"default"` `(batch, 2P)`, the mean of `elmo` over each
            sentence's tokens (zeros for an empty sentence); `"all"`, a dict
            of all of these plus `"mask"` bool `(batch, time)` and
            `"sequence_len"` int32 `(batch,)`.
        mix: how `elmo` combines the biLM's layers, a `WeightLayers` mix:
            `"scalar"` (trained softmax weights and scale, bilm-tf's),
            `"frozen"` (the same, not trained: equal weights, or a seeded
            draw with `mix_seed`), `"average"`, `"top"`, or a learned
            function of each token's layers, `"dense"` or `"attention"`;
            the mix layer is the attribute `mix` (`layer.mix.mix`: the name).
        mix_seed: the seed of a `"frozen"` mix's draw (None: equal weights).
        trainable_mix: train the mix's weights (False freezes any mix).
        trainable_bilm: train the biLM's weights too (fine-tuning).
        do_layer_norm, l2_coef, use_top_only: as in `WeightLayers`
            (`l2_coef=0.0` adds no loss).
        dropout: rate of dropout on `elmo` in training (AllenNLP's `Elmo`
            applies it to the mixed representation); `default` is then the
            mean of the dropped-out `elmo`.
        input_type: `"tokens"` string `(batch, time)` padded with `''`;
            `"sentences"` string `(batch,)` split on whitespace;
            `"char_ids"` int `(batch, time + 2, C)` from `Batcher`;
            `"token_ids"` int `(batch, time + 2)` from `TokenBatcher`
            (token-input models); `"auto"` picks from dtype and rank.
        max_batch_size: if set, a larger batch is an error (the stateless
            layer itself has no limit).
        n_token_vocab: rows of a token-input biLM's token table (options
            without `char_cnn`): the token embedding file's rows plus one
            padding row.
        vocabulary: the tokens of a token-input biLM's vocabulary in file
            order, for text inputs (`"tokens"`/`"sentences"`); unknown
            tokens map to `<UNK>`.
        start: where each sentence's LSTMs start: `"warm"`, from the start
            state weights (the boundary state that `from_files` loads, see
            `bilm.models.start_state`), or `"zeros"`. The start state is a
            (non-trainable) weight of the layer, so `.keras` archives and
            SavedModels carry it.
        kernel_dtype: `"float32"` (None: the same), or `"bfloat16"` or
            `"int8"` to keep the biLM's kernels so (see
            `BidirectionalLanguageModel`); not with `trainable_bilm`.
        matmul_dtype: deprecated, the old name of `kernel_dtype` (the
            configs of `.keras` files saved before the rename still load).
        **kwargs: passed to `keras.layers.Layer` (`name`...). The layer
            computes in float32 (`dtype` may only be float32) whatever the
            global dtype policy; the layers after it follow the policy.

    Call arguments:
        inputs: see `input_type`. For `"tokens"` a row's tokens are the
            ones before its first `''`; anything after it is ignored. Give
            `fit` strings as tensors or a `tf.data.Dataset`: Keras's NumPy
            adapter rejects NumPy string arrays.
        training: Python bool; enables `dropout`, and the biLM's training
            paths where it trains (`trainable_bilm`: gradients through it on
            every backend).

    Returns:
        The tensor (or dict) named by `output`, with `time` the input's
        token axis (for char/token ids, the ids' time minus the two
        boundaries). Sequence outputs are zero beyond each row's length and
        carry the `(batch, time)` Keras mask, so masking layers downstream
        (LSTM, ...) skip the padding.

    `to_ids` (text -> biLM ids, in graph; `bilm.models.elmo_inputs`) and
    `embed_ids` (ids -> every output) are the two halves of `call`.

    In a Keras model: the README's tagger and docs/keras.md (XLA: ids compile; text sets `supports_jit =
    False`, so Keras compiles the model without XLA). References: Peters et al., 2018
    (https://arxiv.org/abs/1802.05365); TF-Hub's ELMo module (output names); AllenNLP's `Elmo` (dropout).
    """

    def __init__(self, options, output="elmo", mix="scalar", mix_seed=None, trainable_mix=True, trainable_bilm=False,
                 do_layer_norm=False, l2_coef=0.0, use_top_only=False, dropout=0.0, input_type="auto",
                 max_batch_size=None, n_token_vocab=None, vocabulary=None, start="zeros", kernel_dtype=None,
                 matmul_dtype=None, **kwargs):
        # float32 whatever the global policy (see the class docstring).
        kwargs["dtype"] = float32_policy(kwargs.get("dtype"), "ELMoEmbedding")
        super().__init__(**kwargs)
        options = load_options(options)
        use_character_inputs = options.char_cnn is not None
        options = options.for_prediction(use_character_inputs)
        kernel_dtype = check_layer_arguments(
            options, output=output, input_type=input_type, dropout=dropout, max_batch_size=max_batch_size,
            start=start, kernel_dtype=kernel_dtype, matmul_dtype=matmul_dtype, trainable_bilm=trainable_bilm,
            n_token_vocab=n_token_vocab)
        self.options = options
        # `Layer.output` is Keras's (the symbolic output tensor).
        self.output_key = output
        self.mix_seed = mix_seed
        self.trainable_mix = trainable_mix
        self.trainable_bilm = trainable_bilm
        self.do_layer_norm = do_layer_norm
        self.l2_coef = l2_coef
        self.use_top_only = use_top_only
        self.dropout = dropout
        self.input_type = input_type
        self.max_batch_size = max_batch_size
        self.n_token_vocab = None if use_character_inputs else int(n_token_vocab)
        self.vocabulary = None if vocabulary is None else list(vocabulary)
        self.start = start
        self.kernel_dtype = kernel_dtype
        self.use_character_inputs = use_character_inputs
        self.supports_masking = True

        self.network = build_bilm(options, n_token_vocab=self.n_token_vocab, kernel_dtype=kernel_dtype, name="bilm")
        self.network.trainable = trainable_bilm
        # `self.mix` is the mix layer (its name in saved archives); the `mix` argument is its kind, `self.mix.mix`.
        self.mix = WeightLayers(mix=mix, l2_coef=l2_coef or None, use_top_only=use_top_only,
                                do_layer_norm=do_layer_norm, seed=mix_seed, name="elmo_mix", dtype=FLOAT32)
        self.mix.trainable = self._mix_trains()
        self.dropout_layer = keras.layers.Dropout(dropout, name="elmo_dropout", dtype=FLOAT32) if dropout else None
        self._set_up_text_inputs()
        self.start_state = {key: self.add_weight(name=f"start_{key}", shape=(size,), initializer=Filled(0.0),
                                                 trainable=False)
                            for key, _, size in state_keys(self.options)}

    @classmethod
    def from_files(cls, options_file, weight_file, *, embedding_weight_file=None, vocab_file=None, start=None,
                   warm_up=None, boundary_state=None, **kwargs):
        """An `ELMoEmbedding` with the weights of `weight_file` (the arguments: `elmo_embedding_from_files`'s)."""
        kwargs["kernel_dtype"] = renamed_argument("kernel_dtype", kwargs.pop("kernel_dtype", None), "matmul_dtype",
                                                  kwargs.pop("matmul_dtype", None), None)
        return elmo_embedding_from_files(cls, options_file, weight_file, embedding_weight_file=embedding_weight_file,
                                         vocab_file=vocab_file, start=start, warm_up=warm_up,
                                         boundary_state=boundary_state, **kwargs)

    def set_scalar_mix(self, W, gamma, source="scalar_mix"):
        """Sets the mix's weights (a published module's learned mix): `W` `(n_layers + 1,)`, `gamma` `(1,)`."""
        self.build()
        expected = (self.options.n_layers + 1,)
        if tuple(np.shape(W)) != expected or np.size(gamma) != 1:
            raise WeightFileError(f"{source}: the scalar mix has W {np.shape(W)} and gamma {np.shape(gamma)}; "
                                  f"this model needs W {expected} and one gamma.")
        if self.mix.W is not None:
            self.mix.W.assign(np.asarray(W, np.float32))
        self.mix.gamma.assign(np.asarray(gamma, np.float32).reshape(1))

    def set_start_state(self, start_state):
        """Sets `start` and the start state weights from a `StartState`."""
        for key, vector in start_state.vectors(self.options).items():
            self.start_state[key].assign(np.asarray(vector, np.float32))
        self.start = start_state.start

    @property
    def trainable(self):
        return keras.layers.Layer.trainable.fget(self)

    @trainable.setter
    def trainable(self, value):
        keras.layers.Layer.trainable.fset(self, value)
        # Unfreezing the layer must not unfreeze parts frozen by the constructor (the biLM unless trainable_bilm,
        # the mix unless trainable_mix).
        if value and hasattr(self, "mix"):
            self.network.trainable = self.trainable_bilm
            self.mix.trainable = self._mix_trains()

    def _mix_trains(self):
        # Outputs that do not use the mix would leave W and gamma without
        # gradients (and Keras warning about it).
        return self.trainable_mix and self.output_key in ("elmo", "default", "all")

    def build(self, input_shape=None):
        if not self.mix.built:
            self.mix.build((None, self.options.n_layers + 1, None, 2 * self.options.projection_dim))
        self.built = True

    def call(self, inputs, training=None):
        if self._note_input_type(inputs) in TEXT_INPUT_TYPES and compiling_text_with_xla():
            raise UserError(
                f"{self.name}: text inputs cannot be compiled with XLA (string ops). Build the layer with "
                "input_type='tokens' or 'sentences' (Keras then compiles the model without XLA), compile the "
                "model with jit_compile=False, or give it ids (Batcher, or layer.to_ids in the input pipeline).")
        outputs = self.embed_ids(self.to_ids(inputs), training=training)
        return outputs if self.output_key == "all" else outputs[self.output_key]

    def embed_ids(self, ids, training=None):
        """All outputs from biLM ids (with the `<S>`/`</S>` boundaries).

        Args:
            ids: int32 `(batch, time + 2, C)` char ids or `(batch, time + 2)`
                token ids, shifted +1 with 0 as padding.
            training: enables `dropout` on `elmo`, and the biLM's training
                paths where it trains (`trainable_bilm`).

        Returns:
            dict: `word_emb`, `lstm_outputs{l}`, `elmo`, `default`, `mask`,
            `sequence_len` (see the class docstring).
        """
        batch = ops.shape(ids)[0]
        if self.max_batch_size is not None:
            check_rows(batch, self.max_batch_size, self.name)
        inputs = {"token_characters" if self.use_character_inputs else "token_ids": ids}
        for key, _, size in state_keys(self.options):
            inputs[key] = ops.broadcast_to(self.start_state[key], (batch, size))
        # The biLM has no dropout. Its layers take their training paths only where it trains (`trainable_bilm`): a
        # frozen biLM runs its inference paths (the fast ones), which no gradient goes through.
        trains_bilm = bool(training) and self.network.trainable
        layers = elmo_outputs(direct_call(self.network, inputs, training=trains_bilm), self.options.n_layers)
        lm_embeddings, mask, lengths = (layers[key] for key in ("lm_embeddings", "mask", "lengths"))
        elmo = self.mix(lm_embeddings, mask=mask)
        # Layer norm moves padded positions away from zero; padding stays zero here.
        elmo = ops.where(ops.expand_dims(mask, -1), elmo, ops.zeros_like(elmo))
        if self.dropout_layer is not None:
            elmo = self.dropout_layer(elmo, training=training)
        return named_outputs(lm_embeddings, elmo, mask, lengths, self.options.projection_dim, self.options.n_layers)

    matmul_dtype = deprecated_alias("matmul_dtype", "kernel_dtype")
    # The old name of `network`. Keras's saving stores a nested layer under the first attribute name (sorted) that
    # reaches it: this alias keeps the biLM's weights at `.../bilm/...` in .keras and .weights.h5 files, where files
    # saved before the rename have them (so they load without a path shim or a warning).
    bilm = deprecated_alias("bilm", "network")
