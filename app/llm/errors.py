"""One error hierarchy for the LLM layer. Callers catch `LLMError`; nothing else escapes a call."""

from __future__ import annotations


class LLMError(Exception):
    """Any failure of an LLM call; a diagnosis never fails because of one."""

    retryable: bool = False


class UnknownBackendError(LLMError, ValueError):
    """The registry was asked for a backend name it does not know (never a silent default)."""


class BackendUnavailable(LLMError):
    """The backend cannot serve at all (`none` backend, missing optional dependency, dead endpoint)."""


class UnsupportedOperation(LLMError):
    """The backend does not offer this call (e.g. free-written JSON from a local scoring model)."""


class LLMTimeout(LLMError):
    retryable = True


class LLMRateLimited(LLMError):
    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMServerError(LLMError):
    retryable = True


class LLMConnectionError(LLMError):
    retryable = True


class LLMBadResponse(LLMError):
    """The answer could not be parsed or did not validate (after the one repair retry)."""


class CircuitOpenError(LLMError):
    """The circuit breaker is open: recent calls failed, calls are skipped until the cool-down ends."""


class PromptError(ValueError):
    """A prompt file is malformed; the message names the file and the offending variable."""
