"""Other libraries' code for the benches to compare against: a wheel from the package registry, never installed."""
import os
import subprocess
import sys
import tempfile
import zipfile


def wheel_folder(cache_dir, requirement, name):
    """The files of `requirement`'s wheel (`pip download --no-deps`), extracted into `cache_dir/name` once."""
    folder = os.path.join(cache_dir, name)
    if not os.path.isdir(folder):
        os.makedirs(cache_dir, exist_ok=True)
        wheels = tempfile.mkdtemp(dir=cache_dir)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", requirement, "--no-deps", "-d", wheels],
                       check=True)
        wheel = next(os.path.join(wheels, entry) for entry in os.listdir(wheels) if entry.endswith(".whl"))
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(folder + ".partial")
        os.replace(folder + ".partial", folder)
    return folder

