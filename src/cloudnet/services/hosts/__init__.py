"""Hosts (agents): registration, heartbeats and reports, joins, checks, the desired state each gets."""
