"""Time units shared by every layer: all internal times are integer nanoseconds."""

from __future__ import annotations

NS = 1_000_000_000        # nanoseconds per second
NS_PER_MS = 1_000_000     # nanoseconds per millisecond
