"""The model runner: turns a scheduler step into one forward pass and a sampled token per row."""
