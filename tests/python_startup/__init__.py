"""The folder whose ``sitecustomize`` every Python process the tests start loads (``tests/conftest.py`` puts
it first on ``PYTHONPATH``)."""

from pathlib import Path

FOLDER = str(Path(__file__).resolve().parent)
