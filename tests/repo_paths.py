"""Where the tests find the repository: test files sit at different depths of tests/ (it mirrors src/haldet/)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
PACKAGE = REPO / "src" / "haldet"
