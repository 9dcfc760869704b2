"""Where the tests' own files lie, for tests in any folder of tests/: captured fixtures, the support scripts a test
starts as a process, and the repository."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
SUPPORT = TESTS / "support"
FIXTURES = TESTS / "fixtures"
REPO = TESTS.parent
