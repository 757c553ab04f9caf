from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import PageNumberPagination


class JobPagination(PageNumberPagination):
    """``?page=N`` (and ``?page_size=M``, at most 100: larger values give 100); body ``{count, next,
    previous, results}``. A ``page_size`` that is not a positive integer (an empty one included) is a 400 naming it, like
    every other bad query parameter, instead of being silently replaced by the default; a ``page``
    that is not a positive integer (empty, ``last``, text) is a 404, as a page past the end is."""

    page_size = 25
    page_size_query_param = "page_size"
    max_page_size = 100

    def get_page_size(self, request):  # noqa: ANN001, ANN201 - DRF's signature
        raw = request.query_params.get(self.page_size_query_param)
        if raw is not None and (not (raw.isascii() and raw.isdigit()) or int(raw) < 1):
            raise ValidationError({self.page_size_query_param: [f"Must be an integer between 1 and {self.max_page_size}."]})
        return super().get_page_size(request)

    def get_page_number(self, request, paginator):  # noqa: ANN001, ANN201 - DRF's signature
        raw = request.query_params.get(self.page_query_param)
        if raw is None:
            return 1
        if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
            raise NotFound("Invalid page.")
        return raw
