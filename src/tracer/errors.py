"""The one exception type a user ever sees. The CLI prints it as `error: ...` and exits 2."""


class TracerError(Exception):
    """Bad input or an unsupported case, explained in one line (plus an optional hint)."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"
