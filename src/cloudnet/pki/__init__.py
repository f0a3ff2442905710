"""The cloud's CA, join tokens and TLS contexts (shared by the server, the API, the agent and the CLI)."""
