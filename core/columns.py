"""The columns of our models, typed, for the statements written out by hand on the hot paths (issue 11).

Django types `Options.get_field` as a field or a reverse relation, and `Field.column` as optional, because some
names have no column (a reverse relation, a field that is not concrete). Those statements only ever name concrete
fields; these two functions say so once, and fail loudly if a name ever stops being one.
"""

from django.db.models import Field, Model


def concrete_field(model: type[Model], name: str) -> Field:
    """`model`'s field `name`, which has a column of its own (TypeError for a reverse relation or a virtual field)."""
    field = model._meta.get_field(name)
    if not isinstance(field, Field) or not field.concrete:
        raise TypeError(f"{model.__name__}.{name} is not a concrete field.")
    return field


def column_name(field: Field) -> str:
    """The database column of a concrete field (TypeError for one without)."""
    if field.column is None:
        raise TypeError(f"{field} has no database column.")
    return field.column
