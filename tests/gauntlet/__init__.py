"""The diagnosis gauntlet: random simulated engines, swept in virtual time, scored against the engine's own record."""
