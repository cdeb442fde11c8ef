"""`perfloop serve`: the local web app (app.py), its guard (auth.py) and how it answers (answers.py)."""
