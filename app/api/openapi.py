"""OpenAPI fragments shared by routers."""

from app.api.errors import error_body

RAW_LOG_BODY = {
    "requestBody": {
        "required": True,
        "description": "The raw log: plain text or gzip/zstd (detected by magic bytes).",
        "content": {
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            "text/plain": {"schema": {"type": "string"}},
        },
    }
}


def _err(description: str) -> dict:
    return {"description": description, "content": {"application/json": {"example": error_body(
        "code", "message", None)}}}


ERRORS = {
    400: _err("Malformed request (bad header value, body cut off by the client)"),
    401: _err("Missing or invalid token"),
    403: _err("Token role too low"),
    404: _err("Not found"),
    422: _err("Invalid input"),
}
