"""Roles and the acting user: the bottom layer every app may use."""
