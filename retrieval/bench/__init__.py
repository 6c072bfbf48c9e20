"""Measurements run by ``retrieval bench``: plain functions returning dicts, no command-line code."""
