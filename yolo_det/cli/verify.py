"""`yolo-det` subcommands for this area (filled in by its issue)."""


def register(sub) -> None:
    """Add this module's subcommands to the `yolo-det` parser."""
