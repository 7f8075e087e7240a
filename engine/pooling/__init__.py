"""Embeddings: an engine process in pooling mode (sentence-transformers models, e.g. MiniLM).

``runner`` computes embeddings with torch; ``service`` serves them over Redis; ``messages``
holds the structs that cross Redis and imports nothing heavy, so API processes may import it.
"""
