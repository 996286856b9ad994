"""Compilers and runtimes, importable as ``functrans.backends.<name>``."""
