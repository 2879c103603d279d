"""A campaign round on its scoring host (``rounds``): every image over the same requests,
timed per slice through a scored run's sandbox, reported as one outcome."""
