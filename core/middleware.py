"""Request guards that hold for every page before any view runs."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

ADMIN_PATH_PREFIX = "/admin/"


class AdminQueryNulByteMiddleware:
    """An admin query parameter holding a NUL byte is refused with 400.

    No column holds one, and PostgreSQL refuses it as a query parameter: the admin's own list filters
    (`?bot_profile=%00`) would otherwise pass it through and answer 500. The API validates its parameters itself
    (DRF's CharField refuses NUL bytes with a field error).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(ADMIN_PATH_PREFIX) and any(
            "\x00" in key or any("\x00" in value for value in values) for key, values in request.GET.lists()
        ):
            return HttpResponseBadRequest("Query parameters cannot contain NUL bytes.")
        return self.get_response(request)
