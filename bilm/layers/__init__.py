"""The Keras layers the biLM is made of, and the ELMo scalar mix."""
