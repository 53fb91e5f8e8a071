"""The graph list's pages: by cursor, so that reading a fleet of thousands to its end costs the
same a page at its end as at its start."""

from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination

from core.errors import UNPROCESSABLE
from core.untrusted import QueryParameterError, query_int


class NameCursorPagination(CursorPagination):
    """A list read by cursor, in name order (names are unique): ``?cursor=`` from the ``next``
    or ``previous`` link, ``?page_size=`` up to 500. A page costs the same at the fleet's end as at
    its start, and counts nothing. A page number, or a page size out of bounds, is a 400 naming it;
    a cursor the list did not write (a string, as the schema says) is a 422 naming it."""

    ordering = "name"
    page_size_query_param = "page_size"
    max_page_size = 500

    def paginate_queryset(self, queryset, request, view=None):
        if "page" in request.query_params:
            raise QueryParameterError("page", "this list is read by cursor: follow its next link (?cursor=)")
        return super().paginate_queryset(queryset, request, view)

    def get_page_size(self, request):
        return query_int(request.query_params, self.page_size_query_param, default=self.page_size,
                         maximum=self.max_page_size, strict=True)

    def decode_cursor(self, request):
        """A string the schema allows that this list did not write: content (422)."""
        try:
            return super().decode_cursor(request)
        except NotFound:
            raise ValidationError({self.cursor_query_param: ["not a cursor this list wrote: follow its next or "
                                                             "previous link"]}, code=UNPROCESSABLE) from None

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update(minimum=1, maximum=self.max_page_size)
        return parameters
