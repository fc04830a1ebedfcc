"""Mutants nobody chose: mutmut over the core modules (``make mutation``); see REPORT.md."""
