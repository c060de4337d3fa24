"""reckon's protocol as a pure, sans-IO model.

Nothing here does I/O, reads a clock or draws a random number: time and
randomness arrive as event fields, and every effect leaves as a command.  The
daemon drives exactly this code; the stateful tests check exactly this code.
"""
