"""The HTTP/JSON API beside the WebSocket one (``/api/v1/...``, an OpenAPI document, the status
page): an ASGI app served by hypercorn's trio worker in the controller's process."""
