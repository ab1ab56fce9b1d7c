"""The network being trained: the training biLM, where its softmax starts, the published model it may adapt,
and its boundary state measured as a prediction network."""
