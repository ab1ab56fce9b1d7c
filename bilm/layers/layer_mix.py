"""How the biLM layers become one ELMo vector per token: the scalar mix (bilm-tf's) and the other mixes."""

import keras
import numpy as np
from keras import ops

from bilm.errors import UserError

# Epsilon of the original's `tf.nn.batch_normalization` call.
_LAYER_NORM_EPSILON = 1e-12


# Ways to combine the biLM layers (the `mix` argument).
MIXES = ("scalar", "frozen", "average", "top", "dense", "attention")
# Mixes with a trainable `gamma` scale.
_GAMMA_MIXES = ("scalar", "average", "top", "attention")


@keras.saving.register_keras_serializable(package="bilm")
class WeightLayers(keras.layers.Layer):
    """Combines the biLM layers into one ELMo vector per token.

    For `n_layers` biLM layers `h_j` (layer 0, the token encoding `x`, is
    `[x, x]`, so that it is as wide as the LSTM layers' `[forward,
    backward]`), `mix` chooses how:

    - `"scalar"` (bilm-tf's `weight_layers`, the default):
      `gamma * sum_j s_j * h_j` with `s = softmax(W + 1 / n_layers)`, `W`
      starting at zeros and `gamma` at one, both trained.
    - `"frozen"`: the same sum with `W` and `gamma` not trained: at equal
      weights (`W = 0`, the average) when `seed` is None, else at the
      seeded draw `W ~ N(0, 1)` (NumPy's `default_rng(seed)`). They are
      (non-trainable) weights, so they can also be set, e.g. to a mix
      learned on another task.
    - `"average"`: `gamma * mean_j h_j`, only `gamma` trained.
    - `"top"`: `gamma * h_top`, only `gamma` trained (`use_top_only=True`
      is the same).
    - `"dense"`: a learned function of each token's layers:
      `concat_j(h_j) @ kernel + bias`, `kernel` `(n_layers * dim, dim)`
      starting at the average (`n_layers` stacked `I / n_layers`) and `bias`
      at zeros.
    - `"attention"`: a learned per-token mix:
      `gamma * sum_j a_tj * h_tj` with
      `a_t = softmax_j(h_tj . v + b_j)`, `v` `(dim,)` and `b`
      `(n_layers,)` starting at zeros (the average), so every token
      chooses its own weighting.

    Every mix is applied to each token on its own: an output position
    depends on that position's layers only (`do_layer_norm`'s statistics
    aside). Calling the same instance on several inputs (e.g. question and
    context) shares its weights between them.

    Args:
        mix: one of `MIXES` (above).
        l2_coef: float or None. When set, the weights that learn the mix
            carry an L2 term pulling them toward the average:
            `l2_coef * sum(W ** 2)` (`"scalar"`, bilm-tf's),
            `l2_coef * sum((kernel - average) ** 2)` (`"dense"`),
            `l2_coef * (sum(v ** 2) + sum(b ** 2))` (`"attention"`); the
            other mixes have none. One term per weight in the layer's (and a
            model's) `losses`, however many inputs the instance is called
            on; `regularization_loss()` gives their current sum.
        use_top_only: bool, the same as `mix="top"` (bilm-tf's argument).
        do_layer_norm: bool. Normalise each layer before the mix with a
            scalar mean and variance taken over all unmasked positions and
            all features of that layer in the batch.
        seed: int or None, the draw of a `"frozen"` mix (None: equal
            weights). Other mixes take no seed.
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
    layer = bilm.layers.WeightLayers(l2_coef=0.001, name="input_ELMo")
    elmo = layer(lm_embeddings, mask=mask)  # (2, 5, 8)
    layer.losses  # [l2_coef * sum(W ** 2)]
    layer.layer_weights()  # (3,): softmax(W), the share of each layer
    ```

    Reference:
        - [Peters et al., 2018](https://arxiv.org/abs/1802.05365)
        - bilm-tf, `bilm/pretrained.py`, `weight_layers`.
    """

    def __init__(self, mix="scalar", l2_coef=None, use_top_only=False, do_layer_norm=False, seed=None, **kwargs):
        super().__init__(**kwargs)
        if mix not in MIXES:
            raise UserError(f"mix must be one of {MIXES}. Received: mix={mix!r}")
        if use_top_only and mix not in ("scalar", "top"):
            raise UserError(f"use_top_only=True is mix='top'; it does not go with mix={mix!r}.")
        if seed is not None and mix != "frozen":
            raise UserError(f"seed draws the weights of a 'frozen' mix; mix={mix!r} takes none. Received: "
                            f"seed={seed!r}")
        self.mix = mix
        self.l2_coef = l2_coef
        self.use_top_only = use_top_only
        self.do_layer_norm = do_layer_norm
        self.seed = seed
        self.supports_masking = True
        # The mix in force: `use_top_only` is "top".
        self.kind = "top" if use_top_only else mix
        self.W = None
        self.gamma = None
        self.kernel = None
        self.bias = None
        self.v = None
        self.b = None

    def build(self, input_shape):
        _check_rank(input_shape)
        n_layers, dim = input_shape[1], input_shape[3]
        if n_layers is None or (self.kind == "dense" and dim is None):
            raise UserError(
                "WeightLayers needs a static number of biLM layers (axis 1 of `lm_embeddings`, shape "
                f"(batch, n_layers, time, dim)){' and dim' if self.kind == 'dense' else ''}. "
                f"Received: shape={tuple(input_shape)}"
            )
        self.n_layers = n_layers
        l2 = self._l2 if self.l2_coef is not None else None
        if self.kind in ("scalar", "frozen"):
            # A weight regularizer gives exactly one L2 term per variable in
            # `losses`, however many inputs a shared instance is called on
            # (bilm-tf's one regulariser per variable).
            trained = self.kind == "scalar"
            start = "zeros" if self.seed is None else keras.initializers.Constant(
                np.random.default_rng(self.seed).normal(size=n_layers))
            self.W = self.add_weight(name="W", shape=(n_layers,), initializer=start, trainable=trained,
                                     regularizer=l2 if trained else None)
        if self.kind == "dense":
            average = np.tile(np.eye(dim, dtype="float32") / n_layers, (n_layers, 1))
            self.kernel = self.add_weight(
                name="kernel", shape=(n_layers * dim, dim), initializer=keras.initializers.Constant(average),
                regularizer=(lambda kernel: self._l2(kernel - average)) if l2 else None)
            self.bias = self.add_weight(name="bias", shape=(dim,), initializer="zeros")
        if self.kind == "attention":
            self.v = self.add_weight(name="v", shape=(dim,), initializer="zeros", regularizer=l2)
            self.b = self.add_weight(name="b", shape=(n_layers,), initializer="zeros", regularizer=l2)
        if self.kind in _GAMMA_MIXES or self.kind == "frozen":
            self.gamma = self.add_weight(name="gamma", shape=(1,), initializer="ones",
                                         trainable=self.kind != "frozen")

    def call(self, lm_embeddings, mask=None):
        _check_rank(lm_embeddings.shape)
        n_layers = lm_embeddings.shape[1]
        time_mask = _time_mask(mask)

        if self.do_layer_norm:
            lm_embeddings = self._layer_norm(lm_embeddings, time_mask)

        if self.kind == "top":
            mixed = lm_embeddings[:, -1]
        elif self.kind == "average":
            mixed = ops.mean(lm_embeddings, axis=1)
        elif self.kind == "dense":
            # (batch, time, n_layers * dim): each token's layers side by side.
            stacked = ops.transpose(lm_embeddings, (0, 2, 1, 3))
            stacked = ops.reshape(stacked, (ops.shape(stacked)[0], ops.shape(stacked)[1], -1))
            return ops.matmul(stacked, ops.cast(self.kernel, stacked.dtype)) + ops.cast(self.bias, stacked.dtype)
        elif self.kind == "attention":
            weights = self._attention(lm_embeddings)  # (batch, n_layers, time)
            mixed = ops.sum(weights[..., None] * lm_embeddings, axis=1)
        else:
            # The original's `+ 1 / n_layers` is kept for fidelity; softmax
            # is shift invariant, so it does not change the weights.
            weights = ops.cast(ops.softmax(self.W + 1.0 / n_layers), lm_embeddings.dtype)
            # (n_layers,) against (batch, n_layers, time, dim).
            mixed = ops.einsum("l,bltd->btd", weights, lm_embeddings)
        return mixed * ops.cast(self.gamma, mixed.dtype)

    def _attention(self, lm_embeddings):
        """Per-token weights of the layers, `(batch, n_layers, time)`."""
        scores = ops.einsum("bltd,d->blt", lm_embeddings, ops.cast(self.v, lm_embeddings.dtype))
        return ops.softmax(scores + ops.cast(self.b, scores.dtype)[None, :, None], axis=1)

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
        """The current L2 term (see `l2_coef`), a scalar tensor; `0.0` when the mix has none."""
        if self.l2_coef is None or self.kind not in ("scalar", "dense", "attention"):
            return ops.convert_to_tensor(0.0, dtype=self.variable_dtype)
        if not self.built:
            raise UserError(
                f"Layer '{self.name}' has no weights yet: call it on `lm_embeddings` (or build it) before asking "
                "for its regularization loss."
            )
        return sum(weight.regularizer(weight) for weight in self.trainable_weights if weight.regularizer)

    def compute_mask(self, lm_embeddings, mask=None):
        return _time_mask(mask)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "mix": self.mix,
                "l2_coef": self.l2_coef,
                "use_top_only": self.use_top_only,
                "do_layer_norm": self.do_layer_norm,
                "seed": self.seed,
            }
        )
        return config


    def layer_weights(self, lm_embeddings=None, mask=None):
        """The share of each layer in the output, a NumPy `(n_layers,)` array summing to one.

        `softmax(W)` for `"scalar"` and `"frozen"`, `1 / n_layers` for
        `"average"`, one-hot on the top layer for `"top"`; for
        `"attention"`, the mean of the per-token weights over the unmasked
        tokens of `lm_embeddings` `(batch, n_layers, time, dim)` (required,
        with `mask` `(batch, time)` as in a call); for `"dense"`, each
        layer's share of the kernel's Frobenius norm. `gamma` is left out
        (it scales all layers alike). The layer must be built.
        """
        if not self.built:
            raise UserError(f"Layer '{self.name}' is not built yet: call it on `lm_embeddings` first.")
        if self.kind == "attention":
            if lm_embeddings is None:
                raise UserError("An 'attention' mix weights each token on its own: pass lm_embeddings (and mask) "
                                "to average its weights over those tokens.")
            if self.do_layer_norm:
                lm_embeddings = self._layer_norm(ops.convert_to_tensor(lm_embeddings), _time_mask(mask))
            weights = ops.convert_to_numpy(self._attention(ops.convert_to_tensor(lm_embeddings)))
            valid = np.ones(weights[:, 0].shape, bool) if mask is None else np.asarray(mask, bool)
            return weights.transpose(0, 2, 1)[valid].mean(axis=0)
        if self.kind == "dense":
            kernel = ops.convert_to_numpy(self.kernel)
            norms = np.linalg.norm(kernel.reshape(-1, kernel.shape[1], kernel.shape[1]), axis=(1, 2))
            return norms / norms.sum()
        if self.kind in ("scalar", "frozen"):
            return ops.convert_to_numpy(ops.softmax(self.W))
        n_layers = self.n_layers
        weights = np.full(n_layers, 1.0 / n_layers) if self.kind == "average" else np.eye(n_layers)[-1]
        return weights.astype("float32")

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
    mix="scalar",
    seed=None,
):
    """bilm-tf's function API around `WeightLayers`.

    Args:
        name: str, prefix of the layer name: `f"{name}_ELMo"`.
        bilm_ops: dict with `"lm_embeddings"`, shape
            `(batch, n_layers, time, dim)`, and `"mask"`, bool shape
            `(batch, time)` (a missing or None mask means all valid).
        l2_coef, use_top_only, do_layer_norm, mix, seed: as in
            `WeightLayers`. Ignored when `layer` is given: the existing
            layer's settings apply.
        layer: an existing `WeightLayers` to reuse (sharing `W` and `gamma`
            between inputs, like bilm-tf's `reuse=True`), or None to create
            one.

    Returns:
        dict with `"weighted_op"`, shape `(batch, time, dim)`;
        `"regularization_op"`, the scalar L2 term (0.0 when `l2_coef` is
        None or the mix has none); and `"layer"`, the `WeightLayers` used.
    """
    if "lm_embeddings" not in bilm_ops:
        raise KeyError(
            "`bilm_ops` must have the key 'lm_embeddings'. "
            f"Received keys: {sorted(bilm_ops)}"
        )
    if layer is None:
        layer = WeightLayers(
            mix=mix,
            l2_coef=l2_coef,
            use_top_only=use_top_only,
            do_layer_norm=do_layer_norm,
            seed=seed,
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
