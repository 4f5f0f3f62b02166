"""The HTTP layer: the routers of the API and the dependencies they share."""
