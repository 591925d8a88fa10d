"""ModelAdmins for providers, models, profiles, bots, threads and messages."""
