"""The model catalog every API process caches: served models and the adapters tenants may call."""
