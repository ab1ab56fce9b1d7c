"""What bilm does on Keras's NumPy backend (`bilm.backend`): the CPU alone, the network called as it is."""
