"""The HTTP edge: schemas, routes, error mapping, metrics and the app factory."""
