"""Users, projects and tokens: the Keystone face, passwords."""
