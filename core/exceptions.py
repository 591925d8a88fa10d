class ApplicationError(Exception):
    """An error a caller can act on; the API answers it with `status_code` and `message`."""

    status_code = 400

    def __init__(self, message: str, *, extra: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra or {}


class NotFoundError(ApplicationError):
    status_code = 404


class ForbiddenError(ApplicationError):
    """The caller may see the object but not do this to it (a 403 with the reason; what they may not see is a 404)."""

    status_code = 403


class ConflictError(ApplicationError):
    """The request is well formed but the object's state refuses it (a retired thread, a Feishu thread)."""

    status_code = 409
