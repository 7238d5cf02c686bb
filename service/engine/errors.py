"""Domain errors of the engine. They carry what an API edge needs to answer, and import no web framework."""

from __future__ import annotations


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""

    code = "engine_error"

    def __init__(self, message: str, *, field: str | None = None, limit: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.limit = limit


class InvalidText(EngineError):
    """Text that cannot be translated as given (control characters, lone surrogates, empty)."""

    code = "invalid_text"


class TokenizerError(EngineError):
    """A tokenizer model that cannot be loaded or does not have the special ids the project needs."""

    code = "tokenizer_error"
