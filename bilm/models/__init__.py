"""The biLM assembled from its layers: the network, the predictor, the ELMo Keras layer, SavedModel export."""
