"""SHA-256 fingerprints of files and JSON values, by which bilm recognises what it wrote or downloaded."""
import hashlib
import json


def file_sha256(path, block_size=1 << 20):
    """The SHA-256 of a file's bytes, as hex (read in blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(block_size), b""):
            digest.update(block)
    return digest.hexdigest()


def json_sha256(value):
    """The SHA-256 of a JSON-ready value (keys sorted), as hex."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()
