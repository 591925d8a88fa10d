from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
# A .env file beside manage.py is read when present; real environment variables win.
env.read_env(str(BASE_DIR / ".env"))
