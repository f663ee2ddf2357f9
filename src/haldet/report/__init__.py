"""Reports of finished runs, built from what the runs stored: the terminal table, Markdown/LaTeX tables and the
self-contained HTML report with its SVG charts."""
