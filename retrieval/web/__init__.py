"""The web front end and JSON API of an index (``retrieval serve``): an ASGI app (FastAPI, served by uvicorn).

- :mod:`retrieval.web.service`: the served index (searches in a thread pool over one loaded model and the last
  published generation; writes through the index's writer lock);
- :mod:`retrieval.web.thumbs`: thumbnails cached in the index folder; :mod:`retrieval.web.uploads`: uploaded
  images decoded and checked before anything is stored;
- :mod:`retrieval.web.app`: the app factory (token, errors), :mod:`retrieval.web.api` (``/api/...``) and
  :mod:`retrieval.web.pages` (the HTML pages, Jinja2 templates and a little plain JavaScript).

Nothing here imports the CLI; ``retrieval serve`` imports this package inside the command.
"""
