"""reckon's I/O shell: trio, WebSockets, SQLite, processes and the CLI.

It makes no protocol decision of its own: it moves bytes, time and processes
in and out of ``model``.
"""
