"""Durable state: the controller's fact store, the agent's record store, the state-directory lock."""
