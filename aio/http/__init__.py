"""What the API (`aio.server`) and the dashboard (`aio.dashboard`) share, below both: the app state the routes
get, API and admin key checks with their failure limiter, per-key limits, JSON bodies read as text, and the
FastAPI dependencies that hand these out.
"""
