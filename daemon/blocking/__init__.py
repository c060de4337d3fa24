"""The blocking client of the controller: what the command line, the Slurm-style commands and
``import reckon`` all call through (``client.py``, over the minimal WebSocket of ``websocket.py``).
Light: no trio, no model, so a short-lived command pays little to import it."""
