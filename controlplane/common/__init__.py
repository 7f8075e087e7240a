"""The base every control-plane app and the API may import: API errors, private files, where
a running platform is. It imports no app of the project."""
