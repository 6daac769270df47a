"""Shared fixtures for the Python tests: where the tessera binary and the shared test data are."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tessera_bin():
    path = pathlib.Path(os.environ.get("TESSERA_BINARY", ROOT / "build" / "tessera"))
    if not path.is_absolute():
        path = ROOT / path
    if not path.exists():
        pytest.skip(f"tessera binary not built at {path} (run make build)")
    return path


@pytest.fixture(scope="session")
def testdata():
    path = pathlib.Path(os.environ.get("TESSERA_TESTDATA", ROOT.parent / "shared" / "testdata"))
    if not path.exists():
        pytest.skip(f"shared test data not found at {path} (set TESSERA_TESTDATA)")
    return path
