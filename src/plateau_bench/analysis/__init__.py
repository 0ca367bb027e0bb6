"""Pure analysis over request records: metrics, plateau/knee, diagnosis, comparison.

Nothing in this package performs I/O; every function takes plain data and returns plain data.
"""
