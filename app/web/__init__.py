"""What the worker serves over HTTP (``ETJ_WEB_PORT``): the join state, read from the tables.

In the order a request meets it:

- :mod:`app.web.auth` — who may read the state: an optional bearer token (an aiohttp middleware,
  before any routing or table read; installed by :mod:`app.main`);
- :mod:`app.web.views` — the JSON views (``/joins/``, ``/moods/…``, cars and zones), each
  answered by the worker that owns the key (forwarded there), health, readiness, metrics;
- :mod:`app.web.timeline` — the live timeline page (``/timeline/``), drawn from those views
  and from every peer, with its assets in ``app/web/static/``.

Routes are registered when :mod:`app.main` imports the modules (``app.page``); the metrics
they expose are :mod:`app.metrics`.
"""
