"""MPCP/1 (swift-multipeer wire protocol), an independent Python implementation
written from docs/PROTOCOL.md alone."""
