"""The layers' calls of PyTorch's own (`bilm.backend.fast_layer_call`): `UniqueTokens`'s distinct rows (PyTorch
runs eagerly, so their number may depend on the ids); every other layer runs its portable `keras.ops` code."""
import torch


def unique_tokens(layer, char_ids):
    """`UniqueTokens`'s distinct rows (ascending, `torch.unique` along rows) and each position's index."""
    flat = [torch.reshape(ids, (-1, ids.shape[2])) for ids in char_ids]
    unique, index = torch.unique(torch.cat(flat), dim=0, return_inverse=True)
    indices = [torch.reshape(part, tuple(ids.shape[:2])).to(torch.int32)
               for part, ids in zip(torch.split(index, [f.shape[0] for f in flat]), char_ids)]
    return unique[None], indices


FAST_CALLS = {"unique_tokens": unique_tokens}
