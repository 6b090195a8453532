# `pytester` runs a pytest session inside a test: the fixture's own tests use it to check a conftest.py override.
pytest_plugins = ["pytester"]
