"""Keys and headers shared by the API tests (importable: the test directory is on sys.path)."""

KEYS = "alice-key:tok-alice:alice;bob-key:tok-bob:bob,bob2;ops:tok-admin:*"
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
ADMIN = {"Authorization": "Bearer tok-admin"}
