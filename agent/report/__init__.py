"""`perfloop report`: a session as one self-contained HTML page (data.py gathers it from the
store, plots.py draws it, html.py renders it)."""
