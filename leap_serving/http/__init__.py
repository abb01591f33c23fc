"""``leap serve``: the Ranker over HTTP, for launchers in any language (``app.create_app``)."""
