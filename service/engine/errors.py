"""Domain errors of the engine. They name what went wrong in the engine's own terms (which field of
the engine request, which text of a batch, which limit) and import no web framework: each edge
words them for its users (the API as JSON paths like `q[3]`, the CLI as `line 12`)."""

from __future__ import annotations

from dataclasses import dataclass

FIELD = "{field}"  # where a message names its subject; `worded` puts the edge's name for it there


@dataclass(frozen=True)
class Subject:
    """What an error or a notice is about: a field of the engine request (`texts`, `text`,
    `beam_size`, `attention.layer`, ...) and, for one text of a batch, its index."""

    field: str
    index: int | None = None

    @property
    def path(self) -> str:
        """The engine's own name for it, e.g. `texts[3]`."""
        return self.field if self.index is None else f"{self.field}[{self.index}]"


TEXTS = Subject("texts")  # a translate request's list of texts, as a whole
TEXT = Subject("text")  # the one text of an introspection request


class Worded:
    """A message about a subject: `template` holds FIELD where it names it. Errors and notices."""

    template: str
    subject: Subject | None

    @property
    def message(self) -> str:
        """In the engine's own words (`texts[3] has ...`)."""
        return self.worded(None)

    def worded(self, name: str | None) -> str:
        """With the subject called `name` (an edge's word for it: `q[3]`, `line 12`)."""
        if self.subject is None:
            return self.template
        return self.template.replace(FIELD, self.subject.path if name is None else name)


class EngineError(Worded, Exception):
    """Base of every error the engine raises on purpose. `message` may hold FIELD where it names
    its subject; `subject` says which field (and text) that is."""

    code = "engine_error"

    def __init__(self, message: str, *, field: str | Subject | None = None, limit: int | None = None) -> None:
        self.template = message
        self.subject = Subject(field) if isinstance(field, str) else field
        self.limit = limit
        super().__init__(self.message)


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
