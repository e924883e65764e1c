"""The cost dashboard: `GET /dashboard` (a page) and `/api/dashboard/*` (its JSON), over `aio.reports`, which
`aio report cost` (the terminal) reads too.
"""
