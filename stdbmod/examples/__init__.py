"""Small example modules used by the docs and the tests."""
