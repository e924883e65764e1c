"""The cost dashboard: `GET /dashboard` (a page), `/api/dashboard/*` (its JSON), `aio report cost` (the terminal).

Long ranges read the daily aggregates the log writer keeps (`daily_aggregates`, `daily_histograms`,
`daily_usage`); ranges of up to 48 hours read raw `requests` rows, by the hour.
"""
