"""The base every control-plane app and the API may import: API errors, private files, where
a running platform is, Redis connections and key names, the cache epochs, the engines' status
records. It imports no app of the project."""
