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


class InputTooLong(EngineError):
    """A text over the character or token limit; nothing is silently truncated."""

    code = "input_too_long"


class InvalidRequest(EngineError):
    """A request whose values do not fit together (e.g. n_best above beam_size)."""

    code = "invalid_request"


class UnsupportedPair(EngineError):
    """No loaded model translates the requested language pair."""

    code = "unsupported_language_pair"


class UnknownModel(EngineError):
    code = "unknown_model"


class Overloaded(EngineError):
    """The queue is full; the client should retry after `retry_after` seconds."""

    code = "overloaded"

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProviderUnavailable(EngineError):
    """The configured execution provider cannot run the model (e.g. CUDA asked for, CPU given)."""

    code = "provider_unavailable"


class NotReady(EngineError):
    """Models are still loading or warming up, or the service is draining."""

    code = "not_ready"


class DeadlineExceeded(EngineError):
    code = "deadline_exceeded"


class CallerLeft(EngineError):
    """The caller went away before its answer was ready; its work was dropped."""

    code = "client_closed_request"
