from rest_framework.pagination import PageNumberPagination


class JobPagination(PageNumberPagination):
    """``?page=N`` (and ``?page_size=M`` up to 100); body ``{count, next, previous, results}``."""

    page_size = 25
    page_size_query_param = "page_size"
    max_page_size = 100
