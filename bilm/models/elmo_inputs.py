"""The input half of `ELMoEmbedding`: the forms it takes (text, character or token ids), text turned into the
biLM's ids, the Keras mask and the output shapes each form gives. A mixin of the layer: it reads the layer's
`options`, `input_type`, `vocabulary`, `use_character_inputs` and `output_key`."""
from bilm.models.elmo_outputs import output_specs, sequence_output_names
from bilm.models.network_dtype import FLOAT32
from bilm.models.text_inputs import (
    TEXT_INPUT_TYPES,
    TokenMask,
    dictionary_tables_for,
    inputs_to_ids,
    is_text,
    output_time_shape,
    resolve_input_type,
    token_vocab_table_for,
)
from bilm.utils.backend import on_tensorflow, require_tensorflow


class ELMoInputs:
    """`ELMoEmbedding`'s inputs (see its docstring): `to_ids`, `text_tables`, `compute_mask`,
    `compute_output_spec`."""

    def _set_up_text_inputs(self):
        """The lookup tables of text inputs and the mask layer; called once the layer's settings are set."""
        self.vocab_table = token_vocab_table_for(self.vocabulary)
        # Text's lookup tables are TensorFlow's; other backends take ids.
        self.dictionary_tables = dictionary_tables_for(self.options) if on_tensorflow() else None
        self.token_mask = TokenMask(self.input_type, self.use_character_inputs, name=f"{self.name}_token_mask",
                                    dtype=FLOAT32)
        # Text becomes ids with string ops, which XLA cannot compile: Keras then
        # resolves compile(jit_compile="auto" or True) to no XLA for the model.
        self.supports_jit = self.input_type not in TEXT_INPUT_TYPES

    def __call__(self, inputs, *args, **kwargs):
        if not on_tensorflow() and is_text(inputs):  # before Keras converts them to a backend's tensor
            require_tensorflow(f"{self.name} given text (strings; give ids from bilm.Batcher instead)")
        return super().__call__(inputs, *args, **kwargs)

    def _resolve_input_type(self, inputs):
        return resolve_input_type(self.input_type, inputs, self.use_character_inputs)

    def _note_input_type(self, inputs):
        """The input type of `inputs`; a text one turns `supports_jit` off
        (see the class docstring)."""
        input_type = self._resolve_input_type(inputs)
        if input_type in TEXT_INPUT_TYPES:
            self.supports_jit = False
        return input_type

    def to_ids(self, inputs, sequence_len=None, input_type=None):
        """The biLM's ids for any accepted input form, validated.

        Args:
            inputs: see `input_type`.
            sequence_len: optional int `(batch,)` tokens per row, for string
                tokens only: every token inside the length is real, even `''`.
            input_type: the form of `inputs` (an `input_type` value), or None
                for the layer's own. A layer that takes ids under XLA gets
                them from text in the input pipeline with this:
                `dataset.map(lambda x, y: (layer.to_ids(x, input_type="tokens"), y))`.

        Returns:
            int32 `(batch, time + 2, C)` char ids or `(batch, time + 2)` token
            ids, as `Batcher` / `TokenBatcher` give them.
        """
        return inputs_to_ids(inputs, input_type or self.input_type, self.options, self.use_character_inputs,
                             self.text_tables, sequence_len, who=self.name)

    @property
    def text_tables(self):
        """The lookup tables that turn text into this layer's ids (see
        `bilm.models.text_inputs.tokens_to_ids`), or None for UTF-8 byte ids."""
        return self.dictionary_tables if self.use_character_inputs else self.vocab_table

    def compute_mask(self, inputs, mask=None):
        if self.output_key == "default":
            return None
        # A layer call, so that in the functional API the mask is a node of
        # the graph (downstream layers such as LSTM depend on it).
        token_mask = self.token_mask(inputs)
        if self.output_key != "all":
            return token_mask
        sequence_names = sequence_output_names(self.options.n_layers)
        return {name: token_mask if name in sequence_names else None
                for name in self.compute_output_spec(inputs)}

    def compute_output_spec(self, inputs, training=None):
        batch, time = output_time_shape(self._note_input_type(inputs), inputs.shape)
        specs = output_specs(batch, time, self.options.projection_dim, self.options.n_layers)
        return specs if self.output_key == "all" else specs[self.output_key]
