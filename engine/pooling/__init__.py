"""Embeddings and relevance scores: an engine process in pooling mode (sentence-transformers
bi-encoders such as MiniLM, and cross-encoders with a sequence-classification head).

``runner`` computes embeddings (or pair scores) with torch; ``service`` serves them over Redis;
``messages`` holds the structs that cross Redis and imports nothing heavy, so API processes may
import it.
"""
