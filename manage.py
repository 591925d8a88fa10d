#!/usr/bin/env python
import os
import sys


def main() -> None:
    # Development settings by default (DEBUG on); production is chosen explicitly, as cookiecutter-django does:
    # DJANGO_SETTINGS_MODULE=amuxweb.settings.production.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.local")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as error:
        # A setting the environment must provide: one line saying what to set, not a traceback.
        settings_module = os.environ["DJANGO_SETTINGS_MODULE"]
        sys.stderr.write(f"Configuration error ({settings_module}): {error}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
