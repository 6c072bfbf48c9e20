"""The ``retrieval`` command line (click): each command a few lines over the library."""
