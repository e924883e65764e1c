"""The API's contract, shared by the HTTP layer (aio.server) and the domain code behind it: the OpenAI-shaped
error type and the request bodies. Nothing here knows about FastAPI."""
