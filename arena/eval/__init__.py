"""Evaluation: suites, runs of policies over them, reports and trackers."""
