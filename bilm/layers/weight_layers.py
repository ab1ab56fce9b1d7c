"""Learned scalar mix of the biLM layers (the "ELMo" weighting)."""

import keras
from keras import ops

from bilm.errors import UserError

# Epsilon of the original's `tf.nn.batch_normalization` call.
_LAYER_NORM_EPSILON = 1e-12


@keras.saving.register_keras_serializable(package="bilm")
class WeightLayers(keras.layers.Layer):
    """Collapses the biLM layers into one ELMo representation.

    For `n_layers` biLM layers `h_j` this computes
    `gamma * sum_j s_j * h_j` with `s = softmax(W + 1 / n_layers)`, `W`
    initialised to zeros and `gamma` to one, exactly as bilm-tf's
    `weight_layers`. With `use_top_only=True` it returns `gamma * h_top`
    and has no `W`.

    Calling the same instance on several inputs (e.g. question and context)
    shares `W` and `gamma` between them.

    Args:
        l2_coef: float or None. When set (and not `use_top_only`), `W`
            carries the regularizer `l2_coef * sum(W ** 2)`: one term in the
            layer's (and a model's) `losses` however many inputs the
            instance is called on, as bilm-tf has one term per variable.
            The current value is also given by `regularization_loss()`.
        use_top_only: bool. Use only the top biLM layer instead of the mix.
        do_layer_norm: bool. Normalise each layer before the weighting with
            a scalar mean and variance taken over all unmasked positions and
            all features of that layer in the batch.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`,
            including `name` and `dtype`.

    Call arguments:
        lm_embeddings: float tensor of shape
            `(batch, n_layers, time, dim)`, the stacked biLM layers.
        mask: bool tensor of shape `(batch, time)`, True at real tokens.
            `None` means every position is valid. If Keras attached a mask
            to `lm_embeddings` it is used when `mask` is not given; a
            `(batch, n_layers, time)` mask is reduced to `(batch, time)`.

    Returns:
        Float tensor of shape `(batch, time, dim)`. Its Keras mask is the
        `(batch, time)` mask, so masking propagates downstream.

    Example:
    ```python
    lm_embeddings = np.random.rand(2, 3, 5, 8).astype("float32")
    mask = np.array([[True] * 5, [True] * 3 + [False] * 2])
    layer = bilm.layers.weight_layers.WeightLayers(l2_coef=0.001, name="input_ELMo")
    elmo = layer(lm_embeddings, mask=mask)  # (2, 5, 8)
    layer.losses  # [l2_coef * sum(W ** 2)]
    ```

    Reference:
        - [Peters et al., 2018](https://arxiv.org/abs/1802.05365)
        - bilm-tf, `bilm/pretrained.py`, `weight_layers`.
    """

    def __init__(
        self, l2_coef=None, use_top_only=False, do_layer_norm=False, **kwargs
    ):
        super().__init__(**kwargs)
        self.l2_coef = l2_coef
        self.use_top_only = use_top_only
        self.do_layer_norm = do_layer_norm
        self.supports_masking = True
        self.W = None
        self.gamma = None

    def build(self, input_shape):
        _check_rank(input_shape)
        n_layers = input_shape[1]
        if n_layers is None:
            raise UserError(
                "WeightLayers needs a static number of biLM layers (axis 1 "
                "of `lm_embeddings`, shape (batch, n_layers, time, dim)). "
                f"Received: shape={tuple(input_shape)}"
            )
        if not self.use_top_only:
            # A weight regularizer gives exactly one L2 term per variable in
            # `losses`, however many inputs a shared instance is called on
            # (bilm-tf's one regulariser per variable).
            self.W = self.add_weight(
                name="W",
                shape=(n_layers,),
                initializer="zeros",
                regularizer=self._l2 if self.l2_coef is not None else None,
            )
        self.gamma = self.add_weight(
            name="gamma", shape=(1,), initializer="ones"
        )

    def call(self, lm_embeddings, mask=None):
        _check_rank(lm_embeddings.shape)
        n_layers = lm_embeddings.shape[1]
        time_mask = _time_mask(mask)

        if self.do_layer_norm:
            lm_embeddings = self._layer_norm(lm_embeddings, time_mask)

        if self.use_top_only:
            summed = lm_embeddings[:, -1]
        else:
            # The original's `+ 1 / n_layers` is kept for fidelity; softmax
            # is shift invariant, so it does not change the weights.
            weights = ops.softmax(self.W + 1.0 / n_layers)
            weights = ops.cast(weights, lm_embeddings.dtype)
            # (n_layers,) against (batch, n_layers, time, dim).
            summed = ops.einsum("l,bltd->btd", weights, lm_embeddings)

        return summed * ops.cast(self.gamma, summed.dtype)

    def _layer_norm(self, lm_embeddings, time_mask):
        # One scalar mean and variance per layer over the unmasked positions
        # and all features. Like the original's tf.nn.batch_normalization,
        # the normalisation is then applied to every position, padded ones
        # included.
        if time_mask is None:
            time_mask = ops.ones(
                (ops.shape(lm_embeddings)[0], ops.shape(lm_embeddings)[2]),
                dtype="bool",
            )
        # (batch, 1, time, 1), broadcast against (batch, n_layers, time, dim).
        mask = ops.cast(time_mask, lm_embeddings.dtype)[:, None, :, None]
        dim = ops.cast(ops.shape(lm_embeddings)[-1], lm_embeddings.dtype)
        # At least 1, so an all-padding batch gives zeros, not 0 / 0 = NaN.
        count = ops.maximum(ops.sum(mask) * dim, 1.0)
        masked = lm_embeddings * mask
        mean = ops.sum(masked, axis=(0, 2, 3), keepdims=True) / count
        variance = (
            ops.sum(ops.square((masked - mean) * mask), axis=(0, 2, 3),
                    keepdims=True)
            / count
        )
        return (lm_embeddings - mean) / ops.sqrt(
            variance + _LAYER_NORM_EPSILON
        )

    def _l2(self, W):
        return self.l2_coef * ops.sum(ops.square(W))

    def regularization_loss(self):
        """Current L2 term `l2_coef * sum(W ** 2)`, a scalar tensor.

        `0.0` when `l2_coef` is None or `use_top_only` is set.
        """
        if self.l2_coef is None or self.use_top_only:
            return ops.convert_to_tensor(0.0, dtype=self.variable_dtype)
        if self.W is None:
            raise UserError(
                f"Layer '{self.name}' has no `W` yet: call it on "
                "`lm_embeddings` (or build it) before asking for its "
                "regularization loss."
            )
        return self._l2(self.W)

    def compute_mask(self, lm_embeddings, mask=None):
        return _time_mask(mask)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "l2_coef": self.l2_coef,
                "use_top_only": self.use_top_only,
                "do_layer_norm": self.do_layer_norm,
            }
        )
        return config


def _check_rank(shape):
    if shape is None or len(shape) != 4:
        raise UserError(
            "`lm_embeddings` must be a rank 4 tensor of shape "
            "(batch, n_layers, time, dim). "
            f"Received: shape={None if shape is None else tuple(shape)}"
        )


def _time_mask(mask):
    """Reduces a mask to `(batch, time)`; None stays None."""
    if mask is None:
        return None
    if len(mask.shape) == 3:
        # A Keras mask attached to the 4-D `lm_embeddings`:
        # (batch, n_layers, time). Every layer shares the time mask.
        return ops.any(ops.cast(mask, "bool"), axis=1)
    if len(mask.shape) != 2:
        raise UserError(
            "`mask` must have shape (batch, time). "
            f"Received: shape={tuple(mask.shape)}"
        )
    return ops.cast(mask, "bool")


def weight_layers(
    name,
    bilm_ops,
    l2_coef=None,
    use_top_only=False,
    do_layer_norm=False,
    layer=None,
):
    """bilm-tf's function API around `WeightLayers`.

    Args:
        name: str, prefix of the layer name: `f"{name}_ELMo"`.
        bilm_ops: dict with `"lm_embeddings"`, shape
            `(batch, n_layers, time, dim)`, and `"mask"`, bool shape
            `(batch, time)` (a missing or None mask means all valid).
        l2_coef, use_top_only, do_layer_norm: as in `WeightLayers`. Ignored
            when `layer` is given: the existing layer's settings apply.
        layer: an existing `WeightLayers` to reuse (sharing `W` and `gamma`
            between inputs, like bilm-tf's `reuse=True`), or None to create
            one.

    Returns:
        dict with `"weighted_op"`, shape `(batch, time, dim)`;
        `"regularization_op"`, the scalar L2 term (0.0 when `l2_coef` is
        None or `use_top_only`); and `"layer"`, the `WeightLayers` used.
    """
    if "lm_embeddings" not in bilm_ops:
        raise KeyError(
            "`bilm_ops` must have the key 'lm_embeddings'. "
            f"Received keys: {sorted(bilm_ops)}"
        )
    if layer is None:
        layer = WeightLayers(
            l2_coef=l2_coef,
            use_top_only=use_top_only,
            do_layer_norm=do_layer_norm,
            name=f"{name}_ELMo",
        )
    elif not isinstance(layer, WeightLayers):
        raise TypeError(
            "`layer` must be a WeightLayers instance or None. "
            f"Received: layer={layer!r}"
        )
    weighted = layer(bilm_ops["lm_embeddings"], mask=bilm_ops.get("mask"))
    return {
        "weighted_op": weighted,
        "regularization_op": layer.regularization_loss(),
        "layer": layer,
    }
