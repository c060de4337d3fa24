"""Who is calling: MUNGE credentials (``munge.py``), today's shared token (``token.py``), the
controller's check of a WebSocket handshake (``handshake.py``) and what a client sends in one
(``client.py``)."""
