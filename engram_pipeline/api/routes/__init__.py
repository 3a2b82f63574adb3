"""Route modules of the memory API, one per resource."""
