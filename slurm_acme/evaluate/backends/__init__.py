"""Inference backends: ``builtin`` (PyTorch, runs here), ``opencompass`` and ``lm-eval``
(command templates for those tools and readers of their output files)."""

BACKENDS = ("builtin", "opencompass", "lm-eval")
