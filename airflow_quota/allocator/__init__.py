"""The allocator: one allocation cycle over the deferred admission requests (hosts come later)."""
