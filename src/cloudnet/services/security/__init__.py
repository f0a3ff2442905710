"""Security groups and their rules, port security and allowed address pairs, host-side checks."""
