"""Does a GeneratedEntities name already exist? The paper asks a web search (Brave Search API) and drops a name
found in the results; which check ran is part of the build report.

- `SourceCheck` (offline, the default): a name exists when it is one of the given sources' names (page titles,
  species, medicines). Reported as such: it cannot know names outside those files.
- `SearchCheck` (`--search-url`): a search endpoint the user configures, as a URL template with `{query}` (the
  name, URL-quoted, in double quotes) and optional headers (e.g. an API key read from an environment variable);
  the name exists when the response body contains it (case-insensitive). A failed request is an error naming the
  endpoint, never a guess that the name is new.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable

from haldet.errors import HaldetError


class SourceCheck:
    """Offline: names of the given source files only."""

    def __init__(self, known: Iterable[str]) -> None:
        self.known = {k.lower() for k in known}
        self.description = "offline: names looked up in the given source files only (no web search)"

    def exists(self, name: str) -> bool:
        return name.lower() in self.known


class SearchCheck(SourceCheck):
    """A user-configured search endpoint (and the source files first)."""

    def __init__(self, known: Iterable[str], url: str, *, key_env: str | None = None, header: str = "X-API-Key",
                 timeout: float = 20.0) -> None:
        super().__init__(known)
        if "{query}" not in url:
            raise HaldetError(f"search URL {url!r} has no {{query}} placeholder", where="--search-url",
                              hint="e.g. https://api.search.brave.com/res/v1/web/search?q={query}")
        self.url, self.timeout = url, timeout
        self.headers = {"Accept": "application/json"}
        if key_env:
            key = os.environ.get(key_env)
            if not key:
                raise HaldetError(f"environment variable {key_env} is not set", where="--search-key-env",
                                  hint="export the search API key under that name")
            self.headers[header] = key
        self.description = f"web search at {urllib.parse.urlsplit(url).netloc} (then the given source files)"
        self._memo: dict[str, bool] = {}

    def exists(self, name: str) -> bool:
        if super().exists(name):
            return True
        if name not in self._memo:
            url = self.url.replace("{query}", urllib.parse.quote(f'"{name}"'))
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers=self.headers),
                                            timeout=self.timeout) as resp:
                    body = resp.read().decode("utf-8", errors="replace")
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                raise HaldetError(f"search request for {name!r} failed: {exc}", where="--search-url",
                                  hint="check the endpoint and key; the build resumes from its cache") from None
            self._memo[name] = name.lower() in body.lower()
        return self._memo[name]
