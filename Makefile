# The entry points a newcomer needs. Everything installs into .venv from requirements*.txt.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: install run simulate worker beat connect test test-browser lint format migrations-check messages messages-check bench ci

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# Our packages' bytecode, compiled once here rather than at every start: Python reads a valid .pyc even under
# PYTHONDONTWRITEBYTECODE, and a process that compiles our packages itself pays ~0.35 s
# of CPU each time (bench/bench_startup.py). Incremental: only modules changed since the last run are recompiled.
OUR_PACKAGES := amuxweb core agents threadcontext probe feishu console

install: $(VENV)/.installed
	$(PY) -m compileall -q $(OUR_PACKAGES)

# The embedded default: SQLite, a broker in a SQLite file (no server), the local_rules provider, demo data,
# http://127.0.0.1:8000/admin/. honcho runs the Procfile: web (gunicorn), two workers (short tasks;
# turns), beat and feishu_connect (the long connection of bots that use it); one Ctrl-C stops all. manage.py's default settings are amuxweb.settings.local.
run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py embedded_broker_prepare  # its tables and queues before the Procfile's processes start together
	$(PY) manage.py seed_demo
	$(PY) manage.py ensure_admin
	mkdir -p var
	rm -rf var/prometheus  # per-process metric files of the last run (docs/deploying.md, Monitoring)
	PATH="$(abspath $(VENV))/bin:$$PATH" DJANGO_SETTINGS_MODULE=amuxweb.settings.local $(VENV)/bin/honcho -f Procfile start

# With `make run` serving in another shell: post a signed, encrypted scripted Feishu conversation to it.
simulate: install
	$(PY) manage.py feishu_simulate --bot planner --provision

# A worker, beat or the long connection alone (production: DJANGO_SETTINGS_MODULE=amuxweb.settings.production).
worker: install
	DJANGO_SETTINGS_MODULE=$${DJANGO_SETTINGS_MODULE:-amuxweb.settings.local} $(VENV)/bin/celery -A amuxweb worker --loglevel=INFO

beat: install
	DJANGO_SETTINGS_MODULE=$${DJANGO_SETTINGS_MODULE:-amuxweb.settings.local} $(VENV)/bin/celery -A amuxweb beat --loglevel=INFO

connect: install
	$(PY) manage.py feishu_connect

# SQLite by default; against PostgreSQL + Redis (+ a real Celery worker) when DATABASE_URL/REDIS_URL are set.
# One process, every test including the browser tests (run where /usr/bin/chromium exists, skipped otherwise);
# tests/isolation.py fails any test that leaves a loop, thread, process or environment change behind.
# In file order unless asked: PYTEST_ARGS='--random-order' shuffles (pytest-random-order; the seed is printed,
# and --random-order-seed=N replays it).
test: install
	$(PY) -m pytest $(PYTEST_ARGS)

# The console in Chromium (Debian's /usr/bin/chromium; skipped when absent). Screenshots: var/browser-screenshots/
test-browser: install
	$(PY) -m pytest tests/browser -m browser

# After adding or changing a translatable string: refresh the catalogs, translate the new entries, run it again.
# No source locations in the catalogs: they changed with every edit of any file and made every merge conflict.
MESSAGES_IGNORE := --ignore=.venv --ignore=tests --ignore=var --ignore=staticfiles --ignore=bench
messages: install
	DEBUG=true $(PY) manage.py makemessages -l zh_Hans -l ja --no-obsolete --no-location $(MESSAGES_IGNORE)
	DEBUG=true $(PY) manage.py compilemessages --ignore=.venv

# Fails on any untranslated or fuzzy entry, or a .mo file that does not match its .po (needs gettext).
messages-check: install
	$(PY) -m pytest tests/test_admin_i18n.py

# mypy's files, plugins and per-app strictness are in pyproject.toml ([tool.mypy]); its cache is .mypy_cache/.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

migrations-check: install
	$(PY) manage.py makemigrations --check --dry-run

bench: install
	$(PY) -m bench

ci:
	bash .ci/run
