"""The controller daemon: WebSocket endpoints for agents and clients around ``model.Controller``."""
