"""Small real models used by the examples, tests and the evaluation backend."""
