"""The cost reports: the SQL behind the dashboard's JSON (`aio.dashboard`) and `aio report cost` (the terminal).

Long ranges read the daily aggregates the log writer keeps (`daily_aggregates`, `daily_histograms`,
`daily_usage`); ranges of up to 48 hours read raw `requests` rows, by the hour. No HTTP here: the dashboard and
the CLI both call `service`.
"""
