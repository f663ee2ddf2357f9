"""Small utilities every layer above the core may use: file locks and notices, thread counts, progress lines,
embedded assets (models and data shipped in PyPI packages), generation token limits."""
