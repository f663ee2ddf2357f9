"""Reports of finished runs, built from what the runs stored: the terminal table, Markdown/LaTeX tables and the
self-contained HTML report, whose figures `haldet.figures` draws (also written as PDF and PNG files)."""
