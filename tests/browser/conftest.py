"""Browser tests: Playwright for Python driving Debian's Chromium against pytest-django's live server.

Chromium comes from apt (`apt-get install chromium`), never from `playwright install`: the machines have no
network but the package registries. Without /usr/bin/chromium every test here is skipped with that reason, so
`make test` passes on a laptop; `.ci/run` installs it, and `make test` runs these with the rest of the suite.

The invariant: a browser test leaves nothing behind for the tests after it. Playwright's sync API marks its
event loop as this thread's running loop for as long as Playwright is started, and then any later test that
runs an asyncio loop here fails ("Cannot run the event loop while another loop is running", issue 29). So
Playwright, Chromium and the permission Django needs to run the ORM beside that loop live for one test module
and are stopped and undone at its end (tests/isolation.py checks that nothing stays).

Every page a test opens is watched: a console error or an uncaught exception fails the test at teardown.
Screenshots go to BROWSER_SCREENSHOTS_DIR (default var/browser-screenshots/), which `.ci/run` prints.
"""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The width the console is designed for (issue 14, item 5): a laptop at 1440 px with the admin sidebar open.
VIEWPORT = {"width": 1440, "height": 900}
SCREENSHOTS_DIR = Path(
    os.environ.get("BROWSER_SCREENSHOTS_DIR", Path(__file__).resolve().parents[2] / "var" / "browser-screenshots")
)
ADMIN_PASSWORD = "browser-test-password-1"


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.browser)
            if not CHROMIUM.exists():
                item.add_marker(pytest.mark.skip(reason=f"{CHROMIUM} is absent (apt-get install -y chromium)"))


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """Chromium for one module's tests; Playwright is stopped (its loop closed, its driver ended) after them."""
    # Lazy load of a heavy SDK: only a run that reaches a browser test pays for Playwright.
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        # Playwright's loop counts as running in this thread between page actions: the ORM calls the tests make
        # there are ordinary synchronous calls, which Django would otherwise refuse. Undone with the module.
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


class WatchedPage:
    """A Playwright page plus every console error and page error it produced."""

    def __init__(self, page, base_url: str) -> None:
        self.page = page
        self.base_url = base_url
        self.errors: list[str] = []
        page.on("console", lambda message: message.type == "error" and self.errors.append(self._describe(message)))
        page.on("pageerror", lambda error: self.errors.append(f"{page.url}: uncaught {error}"))

    def _describe(self, message) -> str:
        return f"{self.page.url}: {message.text}"

    def open(self, path: str):
        response = self.page.goto(self.base_url + path)
        assert response is not None and response.status == 200, f"{path}: HTTP {response and response.status}"
        return response

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS_DIR.mkdir(parents=True, exist_ok=True)
        target = SCREENSHOTS_DIR / f"{name}.png"
        self.page.screenshot(path=str(target), full_page=True)
        return target

    def log_in(self, *, username: str, password: str) -> None:
        self.open("/admin/login/?next=/admin/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", password)
        self.page.click("input[type=submit]")
        self.page.wait_for_url(self.base_url + "/admin/")


@pytest.fixture
def console_page(browser, live_server) -> Iterator[WatchedPage]:
    context = browser.new_context(viewport=VIEWPORT, locale="en-US")
    watched = WatchedPage(context.new_page(), live_server.url)
    yield watched
    context.close()
    assert watched.errors == [], "console errors:\n" + "\n".join(watched.errors)


@pytest.fixture
def operator(transactional_db):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_superuser("operator", "operator@example.com", ADMIN_PASSWORD)
