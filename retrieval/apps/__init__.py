"""User-facing applications: the ``retrieval`` command line."""
