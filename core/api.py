"""The one place errors become JSON bodies: {"message": "...", "extra": {...}}."""

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler

from core.exceptions import ApplicationError
from core.text import storable_json


def exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, ApplicationError):
        return Response({"message": exc.message, "extra": exc.extra}, status=exc.status_code)
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(as_serializer_error(exc))
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    if isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, RequestDataTooBig):
        # Raised by request.body when the body passes DATA_UPLOAD_MAX_MEMORY_SIZE; Django alone would answer 400.
        return Response(
            {"message": "Request body too large.", "extra": {"max_bytes": settings.DATA_UPLOAD_MAX_MEMORY_SIZE}},
            status=413,
        )

    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a real bug: let Django answer 500 and log it
    if not isinstance(exc, exceptions.APIException):
        return response  # DRF answers only its own exceptions (Django's were turned into them above)

    if isinstance(exc.detail, (list, dict)):
        response.data = {"message": "Validation error", "extra": {"fields": response.data}}
    else:
        response.data = {"message": str(exc.detail), "extra": {}}
    # A field's error may quote the input; an unpaired surrogate in it would make the renderer fail with a 500.
    response.data = storable_json(response.data)
    return response


@csrf_exempt  # a POST to an unknown API URL is a JSON 404, not the CSRF middleware's HTML 403
def api_not_found(request: HttpRequest) -> JsonResponse:
    """The last /api/ route: an unknown API URL is a JSON 404 whatever DEBUG says (Django's debug page is HTML)."""
    return JsonResponse({"message": "Not found.", "extra": {}}, status=404)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: a URL no view matches (`/api/v1/threads/abc/`) is JSON under /api/ too, like every API error."""
    if request.path.startswith("/api/"):
        return JsonResponse({"message": "Not found.", "extra": {}}, status=404)
    return defaults.page_not_found(request, exception)


# gunicorn's default limit_request_line: a longer request line is answered 414 before Django sees it.
REQUEST_LINE_MAX_BYTES = 4094


def schema_common_responses(result: dict, generator, request, public) -> dict:
    """drf-spectacular postprocessing hook: the answers every API operation may give, so the schema says so.

    401 for a request without valid credentials (every /api/v1/ view requires them), and 414 for a request line
    over gunicorn's limit.
    """
    too_long = (
        f"The request line (method, path and query) is longer than {REQUEST_LINE_MAX_BYTES} bytes: the server "
        "(gunicorn) refuses it before the API sees it, with a plain-text body."
    )
    error_body = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, operations in result.get("paths", {}).items():
        for operation in operations.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            if path.startswith("/api/v1/"):
                operation["responses"].setdefault(
                    "401", {"description": "No valid token or session.", "content": error_body}
                )
            operation["responses"].setdefault("414", {"description": too_long})
    return result
