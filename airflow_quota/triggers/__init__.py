"""Triggers a quota-managed task defers on: the admission trigger a waiting job sits on."""
