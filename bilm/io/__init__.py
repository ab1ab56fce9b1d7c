"""Files: the HDF5 weight layout, sentence files, embedding files, safe output writing."""
