"""/metrics (A10): the hub's state in Prometheus text format, read from the database when scraped."""
