"""Releases: the catalog, resumable verified downloads, and the Ed25519 trust chain."""
