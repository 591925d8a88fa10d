"""ModelAdmins for turns and automations."""
