"""SequenceMask: which positions of prediction ids are real tokens, all of a training window's are."""
import numpy as np
import pytest

from bilm.layers.sequence_mask import SequenceMask
from layer_testing import run_layer_test

# Shifted char ids (0 is padding): row 0 has three tokens, row 1 one, whose
# first character id is 0 but whose others are not.
CHAR_IDS = np.zeros((2, 4, 3), np.int32)
CHAR_IDS[0, :3] = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
CHAR_IDS[1, 0] = [0, 2, 0]
TOKEN_IDS = np.array([[5, 3, 0, 0], [0, 7, 0, 0]], np.int32)


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("ids", [CHAR_IDS, TOKEN_IDS], ids=["char_ids", "token_ids"])
def test_layer_contract(padded, ids):
    run_layer_test(SequenceMask, {"padded": padded}, ids, expected_output_shape=(2, 4),
                   expected_output_dtype="bool")


def test_a_token_is_real_when_any_of_its_ids_is_nonzero():
    np.testing.assert_array_equal(SequenceMask()(CHAR_IDS).numpy(), [[1, 1, 1, 0], [1, 0, 0, 0]])
    # Token ids: each id on its own, so an interior 0 is padding.
    np.testing.assert_array_equal(SequenceMask()(TOKEN_IDS).numpy(), [[1, 1, 0, 0], [0, 1, 0, 0]])


def test_a_training_window_is_real_everywhere_zero_ids_included():
    for ids in (CHAR_IDS, TOKEN_IDS):
        np.testing.assert_array_equal(SequenceMask(padded=False)(ids).numpy(), np.ones((2, 4), bool))
