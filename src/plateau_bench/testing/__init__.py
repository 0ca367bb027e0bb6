"""Support for tests that run against real third-party inference servers (see real_servers)."""
