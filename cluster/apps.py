from django.apps import AppConfig


class ClusterConfig(AppConfig):
    """GPU nodes and their GPUs, as the node agents report them."""

    name = "cluster"
    verbose_name = "Cluster"
