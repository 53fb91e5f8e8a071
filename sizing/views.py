"""Sizing pages (htmx): a placeholder until the page lands."""
