"""Test-only support, not shipped in the wheel: the real third-party inference servers (real_servers),
the generators of their random-weight models and the pinned server versions (versions.env).

Imported as ``support`` (pytest puts tests/ on sys.path, see pyproject.toml); scripts/real_servers.py
and scripts/provision_common.sh find it at tests/support/.
"""
