"""Facts about SGLang the optimizer and the simulator share (its config file, its failures)."""
