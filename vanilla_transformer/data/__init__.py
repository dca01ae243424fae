"""Parallel corpora: line-aligned text files, `datasets` by name, and the built-in En→De grammar corpus."""
