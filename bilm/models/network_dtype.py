"""The biLM's numerics: every layer of it computes in float32."""
import keras

from bilm.errors import UserError

# Every layer of the biLM computes in float32 whatever the global Keras
# dtype policy (a mixed-precision one included): its numerics are the
# original's; bfloat16 or int8 kernels are `kernel_dtype`'s.
FLOAT32 = "float32"


def float32_policy(dtype, who):
    """A layer's dtype policy around the biLM: float32, given (a name, a policy or its config) or not."""
    if dtype is None:
        return FLOAT32
    policy = keras.dtype_policies.get(dtype)
    if policy.compute_dtype != FLOAT32 or policy.variable_dtype != FLOAT32:
        raise UserError(f"{who} computes in float32 (the biLM's numerics). Received: dtype={policy.name!r}; "
                        "for bfloat16 kernels pass kernel_dtype='bfloat16' (the layers after it may use any "
                        "policy).")
    return policy
