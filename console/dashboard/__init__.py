"""The admin's front page: per bot health, volume, silences, tokens and latency (issue 14 item 1)."""
