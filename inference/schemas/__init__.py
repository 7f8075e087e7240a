"""Request bodies of the OpenAI-compatible API as DRF serializers.

They validate input (bad input never reaches the engine) and describe it in the OpenAPI schema.
"""

from inference.schemas.validation import validate_body

__all__ = ["validate_body"]
