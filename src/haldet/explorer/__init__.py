"""`haldet view`: a local, read-only web explorer over stored runs (results, items, one item's evidence, a
detector's curves and thresholds). `data` reads the run directories; `app` serves them (FastAPI + Jinja2)."""
