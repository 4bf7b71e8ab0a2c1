"""One room per test runner (see runner/runners/__init__ once the registry lands)."""
