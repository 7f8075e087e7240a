"""The Batch API's runner: a Celery task feeds a batch's lines through the same use cases as the
HTTP endpoints (inference/generation, inference/embedding_use_case), at a low engine priority."""
