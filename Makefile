# The entry points a newcomer needs. Everything installs into .venv from requirements*.txt.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: install run simulate worker beat test test-browser lint format migrations-check messages messages-check bench ci

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed

# The embedded default: SQLite, Celery eager, local_rules provider, demo data, http://127.0.0.1:8000/admin/
run: install
	DEBUG=true $(PY) manage.py migrate --noinput
	DEBUG=true $(PY) manage.py seed_demo
	DEBUG=true $(PY) manage.py ensure_admin
	DEBUG=true $(PY) manage.py runserver 127.0.0.1:8000

# With `make run` serving in another shell: post a signed, encrypted scripted Feishu conversation to it.
simulate: install
	DEBUG=true $(PY) manage.py feishu_simulate --bot planner --provision

worker: install
	$(VENV)/bin/celery -A amuxweb worker --loglevel=INFO

beat: install
	$(VENV)/bin/celery -A amuxweb beat --loglevel=INFO

# SQLite by default; against PostgreSQL + Redis (+ a real Celery worker) when DATABASE_URL/REDIS_URL are set.
test: install
	$(PY) -m pytest $(PYTEST_ARGS)

# The console in Chromium (Debian's /usr/bin/chromium; skipped when absent). Screenshots: var/browser-screenshots/
test-browser: install
	$(PY) -m pytest tests/browser -m browser

# After adding or changing a translatable string: refresh the catalogs, translate the new entries, run it again.
MESSAGES_IGNORE := --ignore=.venv --ignore=tests --ignore=var --ignore=staticfiles --ignore=bench
messages: install
	DEBUG=true $(PY) manage.py makemessages -l zh_Hans -l ja --no-obsolete $(MESSAGES_IGNORE)
	DEBUG=true $(PY) manage.py compilemessages --ignore=.venv

# Fails on any untranslated or fuzzy entry, or a .mo file that does not match its .po (needs gettext).
messages-check: install
	$(PY) -m pytest tests/test_admin_i18n.py

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

migrations-check: install
	DEBUG=true $(PY) manage.py makemigrations --check --dry-run

bench: install
	$(PY) -m bench

ci:
	bash .ci/run
