"""Retrieval methods: a sentence in, the training pairs that share (n-gram) overlap with it out."""
