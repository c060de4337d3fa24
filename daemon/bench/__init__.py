"""`reckon bench`: end-to-end and per-stage benchmarks that print figures."""
