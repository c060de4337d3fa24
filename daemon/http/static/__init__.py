"""The status page's files (index.html, status.css, status.js): served by daemon/http/app.py, no build step."""
