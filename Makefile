# The entry points a newcomer needs. Everything installs into .venv from requirements*.txt.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: install run simulate worker beat test lint format migrations-check bench ci

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
	$(PY) -m pytest

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
